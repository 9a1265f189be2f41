"""Lesson 03's sizes by where it runs: smoke (the tests), a CPU, a GPU. One table, read once by the lesson
(`size = ctx.sizes(SIZES)`, `perflab.core.sizes`).

The model and micro-batch every measurement of the lesson uses (the per-cell report, the phases, the
checkpointing comparison, the panel's first setting): GPT-2 small at batch 8 fills a GPU's allocator with
hundreds of MiB; a CPU measures `small-gpt` at batch 4 (tens of MiB, seconds per step); smoke mode the tiny
model. The checkpointing comparison times one round of at least 3 steps per setting on a CPU; a GPU times
two rounds of at least 5, for a steadier ratio (several times longer on a CPU).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    """Lesson 03's sizes for one kind of run (milliseconds are `perflab.core.timing.bench` budgets)."""

    model: str  # a `perflab.workload.models` preset, at its own sequence length
    batch: int  # micro-batch b
    bench_warmup_ms: float  # section 6: one forward + backward, timed with the cell logger paused
    bench_rep_ms: float
    ck_rep_ms: float  # section 9: forward + backward with and without checkpointing
    ck_warmup_ms: float
    ck_rounds: int  # the two settings timed alternately this many times; each keeps its better round
    ck_min_reps: int


SIZES: dict[str, Sizes] = {
    "smoke": Sizes(model="tiny-gpt", batch=2, bench_warmup_ms=1, bench_rep_ms=5, ck_rep_ms=10, ck_warmup_ms=1,
                   ck_rounds=1, ck_min_reps=3),
    "cpu": Sizes(model="small-gpt", batch=4, bench_warmup_ms=50, bench_rep_ms=200, ck_rep_ms=150, ck_warmup_ms=25,
                 ck_rounds=1, ck_min_reps=3),
    "gpu": Sizes(model="gpt2-small", batch=8, bench_warmup_ms=50, bench_rep_ms=200, ck_rep_ms=300, ck_warmup_ms=50,
                 ck_rounds=2, ck_min_reps=5),
}
