"""Tests of `perflab.workload.data`: the one slow dataset of token ids."""

from __future__ import annotations

import time

import pytest
import torch

from perflab.core.errors import InputError
from perflab.workload.data import STRIDE, SlowTokens


def test_an_item_is_next_token_pairs_drawn_from_its_own_generator():
    ds = SlowTokens(4, seq=8, vocab=50)
    x, y = ds[2]
    assert x.shape == y.shape == (8,) and x.dtype == torch.int64 and int(x.max()) < 50
    assert torch.equal(x[1:], y[:-1])  # targets are the inputs shifted by one
    ids = torch.randint(0, 50, (9,), generator=torch.Generator().manual_seed(2))  # seed 0: item i's seed is i
    assert torch.equal(x, ids[:-1]) and torch.equal(y, ids[1:])
    assert torch.equal(ds[2][0], x) and not torch.equal(ds[3][0], x)  # the same item whenever it is read
    other = SlowTokens(4, seq=8, vocab=50, seed=1)[2][0]
    want = torch.randint(0, 50, (9,), generator=torch.Generator().manual_seed(STRIDE + 2))[:-1]
    assert torch.equal(other, want)


def test_a_batch_item_is_a_whole_batch_for_a_loader_without_batching():
    ds = SlowTokens(3, seq=6, vocab=20, batch=4)
    loader = torch.utils.data.DataLoader(ds, batch_size=None)
    batches = list(loader)
    assert len(batches) == 3 and all(x.shape == y.shape == (4, 6) and x.is_contiguous() for x, y in batches)
    assert torch.equal(batches[0][0][:, 1:], batches[0][1][:, :-1])


def test_a_read_waits_its_latency_and_bad_sizes_are_refused():
    ds = SlowTokens(2, seq=4, vocab=10, io_s=0.05)
    t0 = time.perf_counter()
    ds[0]
    assert time.perf_counter() - t0 >= 0.05
    with pytest.raises(InputError, match="≥ 0 s"):
        SlowTokens(2, seq=4, vocab=10, io_s=-1)
    with pytest.raises(InputError):
        SlowTokens(0, seq=4, vocab=10)
    with pytest.raises(IndexError):
        ds[2]
