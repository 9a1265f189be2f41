"""Lesson 12's sizes by where it runs: smoke (the tests), and the rest. One table, read once by the lesson
(`size = ctx.sizes(SIZES)`, `perflab.core.sizes`).

The ranks run one small model (tiny-gpt) wherever the lesson runs, so a CPU and a GPU share their sizes
(the table has no CPU row: a CPU runs the GPU's). Smoke mode keeps one launch short: FSDP and the
pipeline only (tensor parallelism as its formulas), one training step, three micro-batch counts, shorter
stand-in kernels, and no two-node launch (`tests/unit/shard/test_netns.py` runs it as root).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    strategies: tuple[str, ...]  # measured in one torchrun launch (sections 1 to 3)
    microbatches: tuple[int, ...]  # section 3: the pipeline's micro-batch counts m
    forward_ms: float  # section 3: each stage's stand-in forward (its backward holds twice as long)
    steps: int  # section 1: FSDP's AdamW steps
    two_nodes: bool  # section 5: launch the two-node job where the machine allows it
    batch: int = 2  # sequences per rank and step
    seq: int = 32  # tokens per sequence

    @property
    def backward_ms(self) -> float:
        return 2 * self.forward_ms


SIZES: dict[str, Sizes] = {
    "smoke": Sizes(strategies=("fsdp", "pp"), microbatches=(1, 2, 4), forward_ms=40.0, steps=1, two_nodes=False),
    "gpu": Sizes(strategies=("fsdp", "tp", "pp"), microbatches=(1, 2, 4, 8), forward_ms=100.0, steps=2, two_nodes=True),
}
