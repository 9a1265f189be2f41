"""The one dataset of token ids that is slow to read: what a starving training loop waits on.

    >>> ds = SlowTokens(64, seq=32, vocab=1024, io_s=0.05)     # 64 sequences, 50 ms per read
    >>> DataLoader(ds, batch_size=4)                          # (inputs b×s, targets b×s) per batch
    >>> SlowTokens(8, seq=64, vocab=1024, io_s=0.04, batch=4)  # 8 whole batches: DataLoader(batch_size=None)

Reading an item waits `io_s` seconds first: a `time.sleep` stands for slow storage, a wait that uses no
core (as lesson 07's dataset, `perflab.dataloading.dataset`). Each item is random token ids and their
next-token targets (the inputs shifted by one, as `perflab.workload.train.make_batches` makes them),
drawn from the item's own generator (seed `seed · 1_000_003 + i`), so an item is the same whichever
worker reads it and in whatever order: every configuration of lesson 11's ladder trains on the same
sequences. Used by lesson 09's `loader` fault (`perflab.profiling.faults`), lesson 11's ladder
(`perflab.tune`) and the audit's example step (`perflab.audit.examples`).
"""

from __future__ import annotations

import time

import torch

from perflab.core.errors import InputError
from perflab.core.validate import positive_int

STRIDE = 1_000_003  # a prime: the items of two random seeds never share a generator


class SlowTokens(torch.utils.data.Dataset):
    """`n` items of (inputs, next-token targets), token ids below `vocab`; each read waits `io_s` s.

    An item is one sequence of `seq` tokens (shapes s, s), or with `batch` a whole batch of that many
    sequences (b×s, b×s), for a DataLoader that takes items as batches (`batch_size=None`)."""

    def __init__(self, n: int, seq: int, vocab: int, io_s: float = 0.0, *, seed: int = 0, batch: int | None = None):
        self.n, self.seq, self.vocab = positive_int("n", n), positive_int("seq", seq), positive_int("vocab", vocab)
        if io_s < 0:
            raise InputError(f"the read latency must be ≥ 0 s, got {io_s}")
        self.io_s, self.seed = float(io_s), int(seed)
        self.batch = None if batch is None else positive_int("batch", batch)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < self.n:
            raise IndexError(f"item {i} of a dataset of {self.n}")
        if self.io_s:
            time.sleep(self.io_s)
        g = torch.Generator().manual_seed(self.seed * STRIDE + i)
        shape = (self.seq + 1,) if self.batch is None else (self.batch, self.seq + 1)
        ids = torch.randint(0, self.vocab, shape, generator=g)
        return ids[..., :-1].contiguous(), ids[..., 1:].contiguous()
