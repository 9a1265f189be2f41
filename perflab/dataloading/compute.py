"""A training step's device work, calibrated to a chosen time: a loop of square matmuls, not a sleep.

On a CPU the step runs its matmuls on one thread (`threads`, restored afterwards): with two OpenMP
threads on a busy 2-core machine a single 128² matmul sometimes waited 20 ms at a barrier for a
descheduled thread, which would swamp the milliseconds this lesson measures. The matmuls use the same cores the DataLoader's workers need for their transforms; on a
GPU they run on the device while the host is free. `calibrate` times one matmul of size n and
picks how many make up the asked milliseconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from perflab.core.device import synchronize
from perflab.core.errors import InputError


@dataclass
class StepCompute:
    """`reps` matmuls of n×n on `device`, about `target_s` seconds in all."""

    device: torch.device
    n: int
    reps: int
    target_s: float
    threads: int | None = None  # CPU threads for the step (None: 1 on a CPU, untouched on a GPU)

    def __post_init__(self):
        self.a = torch.randn(self.n, self.n, device=self.device)
        self.b = torch.randn(self.n, self.n, device=self.device) / self.n ** 0.5

    def __call__(self, batch: torch.Tensor | None = None) -> float:
        """Run the step's work (touching the batch) and wait for the device; returns seconds."""
        threads = self.threads or (1 if self.device.type == "cpu" else None)
        before = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        try:
            t0 = time.perf_counter()
            x = self.a
            for _ in range(self.reps):
                x = x @ self.b
            if batch is not None:
                x = x + batch.float().mean()
            synchronize(self.device)
            return time.perf_counter() - t0
        finally:
            if threads:
                torch.set_num_threads(before)


def calibrate(ms: float, device: torch.device, *, n: int | None = None, budget_s: float = 0.15) -> StepCompute:
    """A StepCompute that takes about `ms` milliseconds on `device` (timed here, now)."""
    if not ms > 0:
        raise InputError(f"compute time per step must be > 0 ms, got {ms}")
    n = n or (2048 if device.type == "cuda" else 128)
    step = StepCompute(device, n, 1, ms / 1e3)
    step()
    k, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < budget_s or k < 5:
        step()
        k += 1
    per = (time.perf_counter() - t0) / k
    step.reps = max(1, round(ms / 1e3 / per))
    return step
