"""Lesson 16's sizes by where it runs: smoke (the tests), a CPU, a GPU. One table, read once by the lesson.

The CPU sizes keep the whole lesson within about a minute on a 2-core machine: torch's CPU
`_scaled_mm` is a reference loop (a 192³ product takes a few tenths of a second), so the measured GEMMs
stay at a few hundred; a GPU measures the sizes where fp8's Tensor Cores matter.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    step_batch: int  # section 2: one training step of the course's model, batch × tokens
    step_seq: int
    gemm_sizes: tuple[int, ...]  # section 4: m = n = k measured in bf16 and fp8
    gemm_rep_ms: float
    parity_steps: int  # section 5: steps of each training run
    parity_batch: int
    parity_seq: int
    parity_window: int  # steps each run's final loss is averaged over
    mfu_model: str = "llama2-7b"  # section 6: the example step (computed, not run)
    mfu_seq: int = 4096


SIZES: dict[str, Sizes] = {
    "smoke": Sizes(step_batch=2, step_seq=32, gemm_sizes=(32, 48), gemm_rep_ms=5.0, parity_steps=6, parity_batch=2,
                   parity_seq=16, parity_window=3),
    "cpu": Sizes(step_batch=4, step_seq=64, gemm_sizes=(128, 160, 192), gemm_rep_ms=30.0, parity_steps=30,
                 parity_batch=8, parity_seq=64, parity_window=8),
    "gpu": Sizes(step_batch=8, step_seq=128, gemm_sizes=(1024, 2048, 4096, 8192), gemm_rep_ms=100.0, parity_steps=60,
                 parity_batch=16, parity_seq=128, parity_window=10),
}


def for_run(smoke: bool, device) -> Sizes:
    """The sizes for a smoke run, or for `device` (a torch.device or its name): `perflab.core.sizes`."""
    from perflab.core.sizes import for_run as pick

    return pick(SIZES, smoke, device)
