"""The closed-form expectations and the ring schedule, without launching anything.

Each primitive's closed form (`expected`) is cross-checked against its definition applied to the
inputs (`rank_input`) in plain Python; the ring is checked against the playbook's account
(seeds/004, "Ring AllReduce"): reduce-scatter then all-gather, each GPU sends N−1 times per phase,
K/N values each time, 2(N−1)K/N in all.
"""

import random

import pytest
import torch

from perflab.distributed import collectives as C


def definition(primitive, n, k, root=0):
    """What every rank must hold, straight from the definition of each primitive."""
    x = [C.rank_input(primitive, r, n, k, root=root).tolist() for r in range(n)]
    if primitive == "broadcast":
        return [x[root]] * n
    if primitive in ("reduce", "all_reduce"):
        s = [sum(col) for col in zip(*x, strict=True)]
        return [s if (primitive == "all_reduce" or r == root) else None for r in range(n)]
    if primitive in ("gather", "all_gather"):
        cat = [v for r in range(n) for v in x[r]]
        return [cat if (primitive == "all_gather" or r == root) else None for r in range(n)]
    if primitive == "scatter":
        return [x[root][j * k:(j + 1) * k] for j in range(n)]
    if primitive == "reduce_scatter":
        s = [sum(col) for col in zip(*x, strict=True)]
        return [s[j * k:(j + 1) * k] for j in range(n)]
    if primitive == "all_to_all":
        return [[v for r in range(n) for v in x[r][j * k:(j + 1) * k]] for j in range(n)]
    if primitive == "barrier":
        return [[] for _ in range(n)]
    raise KeyError(primitive)


@pytest.mark.parametrize("primitive", C.PRIMITIVES)
@pytest.mark.parametrize("n,k,root", [(2, 2, 0), (3, 4, 1), (4, 2, 0), (4, 3, 3)])
def test_closed_forms_match_definitions(primitive, n, k, root):
    want = definition(primitive, n, k, root)
    for r in range(n):
        got = C.expected(primitive, r, n, k, root=root)
        assert (got is None and want[r] is None) or got.tolist() == want[r], (primitive, r)


def test_inputs_are_readable():
    # the tens digit says where a value came from
    assert C.rank_input("all_reduce", 3, 4, 2).tolist() == [31.0, 32.0]
    assert C.expected("all_to_all", 2, 3, 1).tolist() == [2.0, 12.0, 22.0]
    assert set(C.PRIMITIVES) == set(C.DESCRIPTIONS) == set(C.EQUIVALENTS)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("numel", [8, 24, 29, 100])
def test_ring_simulation_sums(n, numel):
    rng = random.Random(n * 1000 + numel)
    bufs = [[rng.randint(-9, 9) for _ in range(numel)] for _ in range(n)]
    result, log = C.simulate_ring(bufs)
    total = [sum(b[i] for b in bufs) for i in range(numel)]
    assert all(r == total for r in result)
    # every rank sends N−1 times in each phase, to its right neighbour only
    for r in range(n):
        mine = [e for e in log if e["sender"] == r]
        assert len([e for e in mine if e["phase"] == "reduce-scatter"]) == n - 1
        assert len([e for e in mine if e["phase"] == "all-gather"]) == n - 1
        assert {e["receiver"] for e in mine} == {(r + 1) % n}


@pytest.mark.parametrize("n", [2, 4, 5, 8, 16])
def test_ring_traffic_is_2_n_minus_1_k_over_n(n):
    k = n * 1000
    assert C.ring_bytes_sent(k, n, 4) == [int(C.ring_bytes_formula(k, n, 4))] * n
    assert C.ring_bytes_formula(k, n, 4) == 2 * (n - 1) * k / n * 4
    # ≈ 2K for large N (the playbook's "about 2×K"), and much less than what a root carries
    assert C.ring_bytes_formula(k, n, 1) < 2 * k <= C.naive_root_bytes(k, n, 1)


def test_ring_uneven_chunks_still_exact():
    sent = C.ring_bytes_sent(10, 4, 1)  # chunks 3, 3, 2, 2
    assert C.chunk_sizes(10, 4) == [3, 3, 2, 2] and sum(sent) == 2 * 3 * 10  # every chunk travels 2(N−1) times


def test_ring_single_rank_is_a_copy():
    x = torch.arange(5.0)
    y = C.ring_all_reduce(x, 0, 1)
    assert torch.equal(x, y) and y.data_ptr() != x.data_ptr()


def test_barrier_verdict():
    good = [{"arrive_s": 0.2 * r, "leave_s": 0.6} for r in range(4)]
    assert C.barrier_ok(good, 0.2)
    early = [dict(g) for g in good]
    early[0]["leave_s"] = 0.1  # rank 0 left before rank 3 arrived: not a barrier
    assert not C.barrier_ok(early, 0.2)


def test_unsupported_detection():
    assert C.is_unsupported(RuntimeError("ProcessGroupGloo does not support reduce_scatter"))
    assert not C.is_unsupported(RuntimeError("Connection closed by peer"))
