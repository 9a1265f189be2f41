"""Tests of `perflab.dataloading.shuffle`."""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from clirun import perflab

from perflab.core.errors import InputError
from perflab.dataloading import compute, dataset, loader, shuffle, starvation
from perflab.dataloading.shuffle import (
    LCGPermutation,
    hull_dobell_ok,
    parity_alternation,
    worker_shard,
)

from .helpers import CPU

SIZES = [1, 2, 3, 4, 5, 7, 8, 9, 13, 31, 32, 33, 97, 127, 128, 129, 1000, 1023, 1024, 1025, 4099, 65535, 65536, 65537]


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


def test_parity_alternation_needs_two_values():
    assert math.isnan(shuffle.parity_alternation([3]))
    assert shuffle.parity_alternation([1, 2, 3, 4]) == 1.0 and shuffle.parity_alternation([1, 3, 5]) == 0.0


def test_measure_whole_checks_the_values_it_generated(monkeypatch):
    # a generator bug that repeats a value: the checksum of 0..n-1 catches it
    monkeypatch.setattr(shuffle.LCGPermutation, "blocks", lambda self, block: iter([np.zeros(self.n, dtype=np.int64)]))
    with pytest.raises(AssertionError, match="lcg: the generated values are not a permutation of 0..9"):
        shuffle.measure_whole("lcg", 10)


def test_measure_whole_for_every_kind():
    n = 20_000
    got = {k: shuffle.measure_whole(k, n, seed=1) for k in ("lcg", "randperm", "list")}
    assert all(r["n"] == n and r["seconds"] > 0 for r in got.values())
    assert got["randperm"]["peak_bytes"] >= 8 * n  # the int64 tensor torch returns
    # a Python list of n ints: an 8-byte pointer plus a 28-byte int object (pymalloc rounds it to 32)
    # for almost every entry: about 40 bytes an item (lesson 07)
    assert got["list"]["peak_bytes"] > 3 * got["randperm"]["peak_bytes"]
    assert 38 <= got["list"]["peak_bytes"] / n <= 42 and got["randperm"]["peak_bytes"] / n < 8.1


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_lcg_is_a_permutation_for_many_n(seed):
    for n in SIZES:
        p = LCGPermutation(n, seed)
        got = p.block(0, n)
        assert np.array_equal(np.sort(got), np.arange(n)), (n, seed)
        assert np.array_equal(np.concatenate(list(p.blocks(1000))), got), (n, seed)
        if n <= 1025:  # the scalar path (random access) agrees with the vectorised one
            assert [p[i] for i in range(n)] == got.tolist(), (n, seed)


def test_lcg_permutation_of_a_million_and_three():
    n = 10**6 + 3
    got = LCGPermutation(n, 7).block(0, n)
    assert np.array_equal(np.sort(got), np.arange(n))


def test_hull_dobell_conditions():
    assert hull_dobell_ok(5, 1, 16) and not hull_dobell_ok(3, 1, 16) and not hull_dobell_ok(5, 2, 16)
    # check them by brute force: the period is m exactly when both hold
    m = 32
    for a in range(1, 12):
        for c in range(0, 6):
            x, seen = 0, set()
            for _ in range(m):
                seen.add(x)
                x = (a * x + c) % m
            assert (len(seen) == m) == hull_dobell_ok(a, c, m), (a, c)
    for n in SIZES:
        p = LCGPermutation(n, 3)
        assert hull_dobell_ok(p.a, p.c, p.m)


def test_jump_ahead_matches_stepping():
    p = LCGPermutation(1000, 9)
    x = p.x0
    for j in range(p.m):
        assert p.state_at(j) == x
        x = (p.a * x + p.c) % p.m


def test_shards_partition_and_resume_continues():
    p = LCGPermutation(1031, 2)
    full = list(p)
    for world in (1, 2, 3, 8):
        shards = [list(p.shard(r, world)) for r in range(world)]
        assert sorted(sum(shards, [])) == list(range(1031))
        assert sum(len(s) for s in shards) == 1031  # no overlap
    # 2 ranks × 3 DataLoader workers: six disjoint shards that cover everything
    parts = [list(p.shard(*worker_shard(r, 2, w, 3))) for r in range(2) for w in range(3)]
    assert sorted(sum(parts, [])) == list(range(1031))
    it = p.iter_from(0)
    head = [next(it) for _ in range(400)]
    assert head + list(p.iter_from(400)) == full  # resumed from one integer, exactly


def test_lcg_reveals_itself_in_parity():
    v = LCGPermutation(1 << 16, 0).block(0, 1 << 16)
    rnd = np.random.default_rng(0).permutation(1 << 16)
    assert parity_alternation(v) > 0.99 and abs(parity_alternation(rnd) - 0.5) < 0.02


def test_lcg_bad_input():
    with pytest.raises(InputError):
        LCGPermutation(0)
    with pytest.raises(InputError):
        LCGPermutation(10).index(10)


def test_shuffle_cli_is_quick_and_small():
    t0 = time.perf_counter()
    r = perflab("shuffle", "--n", "1000000000", "--start", "123456789", "--count", "5", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert set(out) >= {"n", "seed", "indices"} and len(out["indices"]) == 5
    p = LCGPermutation(10**9, 0)
    assert out["indices"] == [p[i] for i in range(123456789, 123456794)]
    assert time.perf_counter() - t0 < 30  # includes starting Python; the lookup itself is microseconds


def test_shuffle_cli_shard_and_errors():
    r = perflab("shuffle", "--n", "10", "--shard", "1/3", "--json")
    assert json.loads(r.stdout)["indices"] == [LCGPermutation(10)[i] for i in (1, 4, 7)]
    r = perflab("shuffle", "--n", "10", "--shard", "3/3")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = perflab("shuffle", "--n", "2000000")
    assert r.returncode == 2 and "--count" in r.stderr


@pytest.mark.timeout(60)
def test_dataloader_cli_json_keys():
    r = perflab("dataloader", "--workers", "0", "1", "--io-ms", "1", "--transform-ms", "0.2", "--compute-ms", "5",
                "--batches", "6", "--batch", "2", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [x["workers"] for x in rows] == [0, 1]
    for x in rows:
        assert {"workers", "step_s", "data_wait_s", "wait_fraction", "predicted_wait_s"} <= set(x)
    r = perflab("dataloader", "--workers", "-1")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_the_costs_and_the_parity_read_as_tables():
    from perflab.dataloading import shuffle

    costs = shuffle.measure_costs([1000, 2 * 10**5], progress=False)
    assert [(r["kind"], r["n"]) for r in costs.records] == [("lcg", 1000), ("randperm", 1000), ("list", 1000),
                                                           ("lcg", 200000), ("randperm", 200000)]
    assert costs.skipped and "list at N = 2e+05" in costs.skipped[0]
    t = costs.table()
    assert list(t.columns) == ["method", "N", "time", "peak memory"] and t["peak memory"].str.endswith(" MB").all()
    par = shuffle.parity_check(1 << 12)
    assert par.lcg > 0.99 and 0.4 < par.uniform < 0.6
    assert par.table()["consecutive pairs of opposite parity"].str.endswith("%").all()
