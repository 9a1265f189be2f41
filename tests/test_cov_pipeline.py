"""Input pipeline (lesson 07): every refusal names the bad value, edge cases return what they
must, and lab 07's check rejects an answer that changes between calls. Tiny sizes, no workers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from perflab.core.errors import InputError
from perflab.core.grading import LabCheckError
from perflab.dataloading import compute, dataset, lab07, loader, shuffle, starvation
from perflab.dataloading.verdict import measured_verdict

CPU = torch.device("cpu")


@pytest.mark.parametrize("call,needle", [
    (lambda: compute.calibrate(0, CPU), "compute time per step must be > 0 ms, got 0"),
    (lambda: dataset.calibrate_transform(-1), "transform time must be ≥ 0 ms, got -1"),
    (lambda: dataset.PipelineDataset(0), "a dataset needs n ≥ 1 samples, got 0"),
    (lambda: dataset.PipelineDataset(4, io_s=-0.001), "IO latency must be ≥ 0, got -0.001"),
    (lambda: loader.make_loader(dataset.PipelineDataset(4), workers=-1, batch=2), "need workers ≥ 0 and batch ≥ 1"),
    (lambda: loader.measure_loop(workers=0, batch=2, batches=0, io_ms=0, transform_ms=0, step=None),  # type: ignore[arg-type]  # refused before the step is used
     "batches must be ≥ 1, got 0"),
    (lambda: shuffle.hull_dobell_ok(5, 3, 12), "power-of-two modulus ≥ 4, got 12"),
    (lambda: shuffle.LCGPermutation((1 << 62) + 1), "larger than this permutation supports (2^62)"),
    (lambda: shuffle.LCGPermutation(10).shard(2, 2), "shard 2/2: need 0 ≤ rank < world"),
    (lambda: shuffle.parse_shard("first/4"), "--shard wants RANK/WORLD like 0/4, got 'first/4'"),
    (lambda: shuffle.measure_whole("numpy", 10), "kind must be lcg, randperm or list, got 'numpy'"),
    (lambda: starvation.batch_load_s(0, 0.001, 0.0), "batch must be ≥ 1 and per-sample times ≥ 0"),
    (lambda: starvation.steady_wait_s(0.01, 0.02, -1), "workers must be ≥ 0, got -1"),
    (lambda: starvation.simulate(0.01, 0.02, 1, 0), "batches must be ≥ 1, got 0"),
    (lambda: starvation.recommend(8, 0.001, 0.0, 0.02, max_share=1.5), "max_share must be between 0 and 1, got 1.5"),
])
def test_bad_input_names_the_value(call, needle):
    with pytest.raises(InputError) as e:
        call()
    assert needle in str(e.value)


def test_make_dataset_calibrates_the_transform():
    ds = dataset.make_dataset(3, io_ms=0.0, transform_ms=0.0)
    assert len(ds) == 3 and ds.io_s == 0.0 and ds.rounds == 0
    x, y = ds[2]
    assert x.shape == (3, dataset.SIDE - 4, dataset.SIDE - 4) and int(y) == 2
    slow = dataset.make_dataset(3, io_ms=2.0, transform_ms=0.5)
    assert slow.io_s == pytest.approx(0.002) and slow.rounds >= 1


def test_a_dataset_shorter_than_the_run_is_one_line():
    step = compute.StepCompute(CPU, 8, 1, 0.0)
    ld = loader.make_loader(dataset.PipelineDataset(4), workers=0, batch=2)
    with pytest.raises(InputError, match="the dataset ran out after 2 batches; make it longer than 3 batches"):
        loader.run_epoch(ld, step, 3)


def test_parity_alternation_needs_two_values():
    assert math.isnan(shuffle.parity_alternation([3]))
    assert shuffle.parity_alternation([1, 2, 3, 4]) == 1.0 and shuffle.parity_alternation([1, 3, 5]) == 0.0


def test_measure_whole_checks_the_values_it_generated(monkeypatch):
    # a generator bug that repeats a value: the checksum of 0..n-1 catches it
    monkeypatch.setattr(shuffle.LCGPermutation, "blocks", lambda self, block: iter([np.zeros(self.n, dtype=np.int64)]))
    with pytest.raises(AssertionError, match="lcg: the generated values are not a permutation of 0..9"):
        shuffle.measure_whole("lcg", 10)


def test_prediction_with_a_zero_step_has_no_wait_share():
    p = starvation.Prediction(workers=0, load_s=0.0, compute_s=0.0, steady_wait_s=0.0, first_wait_s=0.0,
                              median_wait_s=0.0, step_s=0.0)
    assert p.wait_fraction == 0.0
    assert starvation.predict(4, 0.001, 0.0, 0.004, 1, 5).wait_fraction == pytest.approx(0.0)


def test_verdict_when_every_point_failed():
    frame = pd.DataFrame([{"workers": 0, "status": "error", "reason": "worker hung"},
                          {"workers": 2, "status": "timeout", "reason": "no batch within 5 s"}])
    assert measured_verdict(frame) == "nothing was measured (every point failed): see the reasons in the table"


# ---------------------------------------------------------------- lab 07: an answer that changes between calls

def _index(i, n, a, c, x0):
    """The lab's answer written out: F(i) walked with F until it is < n (F by stepping, fine at these sizes)."""
    m = 1 << max(2, (n - 1).bit_length())

    def F(j):
        x = x0
        for _ in range(j):
            x = (a * x + c) % m
        return x

    y = F(i)
    while y >= n:
        y = F(y)
    return y


def _right_for(calls: int):
    """Right the first `calls` times entry i of a permutation is asked, then 0: a cache that goes stale."""
    seen: dict = {}

    def lcg_index(i, n, a, c, x0):
        key = (i, n, a, c, x0)
        seen[key] = seen.get(key, 0) + 1
        return _index(i, n, a, c, x0) if seen[key] <= calls else 0
    return lcg_index


def test_lab07_passes_the_written_out_answer():
    assert lab07.check_index(_index)


def test_lab07_rejects_values_that_change_when_asked_again():
    with pytest.raises(LabCheckError, match=r"lcg_index: for n = 2 the values are not a permutation of 0..1"):
        lab07.check_index(_right_for(1))


def test_lab07_rejects_shards_that_do_not_partition():
    # right for the graded values and the permutation, then every entry of a shard reads 0
    with pytest.raises(LabCheckError, match=r"lcg_index: for n = 2 the 2 shards overlap or leave gaps"):
        lab07.check_index(_right_for(2))


def test_measure_whole_for_every_kind():
    n = 20_000
    got = {k: shuffle.measure_whole(k, n, seed=1) for k in ("lcg", "randperm", "list")}
    assert all(r["n"] == n and r["seconds"] > 0 for r in got.values())
    assert got["randperm"]["peak_bytes"] >= 8 * n  # the int64 tensor torch returns
    # a Python list of n ints: an 8-byte pointer plus a 28-byte int object for almost every entry
    assert got["list"]["peak_bytes"] > 3 * got["randperm"]["peak_bytes"]


def test_cpu_explanation_says_why_pinning_does_nothing_here():
    from perflab.dataloading import pinned

    text = pinned.cpu_explanation()
    assert text.startswith("No CUDA device here: pin_memory=True has nothing to speed up")
    assert "measure_variants()" in text
