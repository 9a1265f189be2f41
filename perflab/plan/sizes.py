"""Lesson 15's sizes by where it runs: smoke (the tests), a CPU, a GPU. One table, read once by the lesson
(`size = ctx.sizes(SIZES)`, perflab.core.sizes).

The lesson plans a cluster nobody here has, so a GPU here adds nothing: the CPU and GPU rows are the same.
They keep the lesson within about a minute on a 2-core machine: the 7B model's plans trace two and three
of its blocks and extrapolate (`perflab.plan.scale`), a few seconds each.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    model: str  # a preset of perflab.workload.models: sections 1, 3 and 4 plan it
    micro_batch: int  # sequences per GPU
    seq: int  # tokens per sequence
    gpus: int  # the cluster of sections 1 and 4
    more_gpus: int  # section 3: the same job on this many GPUs
    tp: int  # section 3: tensor-parallel degree (with sequence parallelism)
    budget_share: float  # section 4: the budget, this share of the way from full recompute's peak to no recompute's
    rank_kinds: tuple[str, ...]  # section 2: lesson 12's steps (its tiny GPT, 2 × 32 tokens) on two gloo ranks


_FULL = Sizes(model="llama2-7b", micro_batch=1, seq=4096, gpus=8, more_gpus=64, tp=2, budget_share=0.5,
              rank_kinds=("fsdp", "tp"))
SIZES: dict[str, Sizes] = {
    "smoke": Sizes(model="llama2-7b", micro_batch=1, seq=4096, gpus=8, more_gpus=64, tp=2, budget_share=0.5,
                   rank_kinds=("fsdp",)),
    "cpu": _FULL,
    "gpu": _FULL,
}
