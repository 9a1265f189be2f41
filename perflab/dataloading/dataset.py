"""A map-style dataset whose per-sample cost the learner sets: IO latency plus transform work.

IO latency is a wait (`time.sleep`): reading a file or a network object blocks the process without
using a core, which is what a sleep does. Transform work is real CPU work on a real tensor,
decode-like (uint8 → float, normalise) and augmentation-like (flip, crop, a small blur by matmul),
repeated for a number of rounds that `calibrate_transform` sizes to the asked milliseconds on this
machine. Because it uses a core, two workers on a 2-core machine compete with the training step.

Faults for the lesson's fault section: `fail_at` raises inside `__getitem__` for that index,
`hang_at` sleeps `hang_s` there (a hung worker, caught by the loader's `timeout`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from perflab.core.errors import InputError

SIDE = 32  # a 3×32×32 "image" per sample


def transform_round(img: torch.Tensor) -> torch.Tensor:
    """One round of decode-like and augmentation-like work on a uint8 3×SIDE×SIDE image."""
    x = img.float().div_(255.0)
    x = (x - x.mean()) / (x.std() + 1e-6)
    x = torch.flip(x, dims=(2,))
    blur = torch.eye(SIDE) * 0.5 + torch.diag(torch.full((SIDE - 1,), 0.25), 1) + torch.diag(torch.full((SIDE - 1,), 0.25), -1)
    x = x @ blur
    return x[:, 2:SIDE - 2, 2:SIDE - 2]


def calibrate_transform(ms: float, *, budget_s: float = 0.2) -> int:
    """Rounds of `transform_round` that take about `ms` milliseconds on one thread here (0 for ms = 0)."""
    if ms < 0:
        raise InputError(f"transform time must be ≥ 0 ms, got {ms}")
    if ms == 0:
        return 0
    img = torch.randint(0, 256, (3, SIDE, SIDE), dtype=torch.uint8)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in a DataLoader worker, which runs with one thread
    try:
        transform_round(img)
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < budget_s or n < 20:
            transform_round(img)
            n += 1
        per_round = (time.perf_counter() - t0) / n
    finally:
        torch.set_num_threads(threads)
    return max(1, round(ms / 1e3 / per_round))


@dataclass
class PipelineDataset(torch.utils.data.Dataset):
    """n samples; each costs `io_s` seconds of waiting and `rounds` rounds of transform work.

    Returns (image float32 3×28×28, label int64). Deterministic per index.
    """

    n: int
    io_s: float = 0.0
    rounds: int = 0
    fail_at: int | None = None
    hang_at: int | None = None
    hang_s: float = 60.0

    def __post_init__(self):
        if self.n < 1:
            raise InputError(f"a dataset needs n ≥ 1 samples, got {self.n}")
        if self.io_s < 0:
            raise InputError(f"IO latency must be ≥ 0, got {self.io_s}")

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.fail_at is not None and i == self.fail_at:
            raise ValueError(f"sample {i} is corrupt (a planted fault)")
        if self.hang_at is not None and i == self.hang_at:
            time.sleep(self.hang_s)
        if self.io_s:
            time.sleep(self.io_s)
        g = torch.Generator().manual_seed(i)
        img = torch.randint(0, 256, (3, SIDE, SIDE), dtype=torch.uint8, generator=g)
        x = transform_round(img)
        for _ in range(self.rounds - 1):
            x = transform_round(img)
        return x.contiguous(), torch.tensor(i % 10)


def make_dataset(n: int, io_ms: float, transform_ms: float, **faults) -> PipelineDataset:
    """A dataset with `io_ms` of waiting and about `transform_ms` of transform work per sample."""
    return PipelineDataset(n, io_s=io_ms / 1e3, rounds=calibrate_transform(transform_ms), **faults)
