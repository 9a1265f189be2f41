"""Tests of `perflab.distributed.primitives`."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from perflab.core.jsonable import to_json
from perflab.distributed import primitives as P
from perflab.distributed.primitives import BarrierTiming


def definition(primitive, n, k, root=0):
    """What every rank must hold, straight from the definition of each primitive."""
    x = [P.rank_input(primitive, r, n, k, root=root).tolist() for r in range(n)]
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


@pytest.mark.parametrize("primitive", P.PRIMITIVES)
@pytest.mark.parametrize("n,k,root", [(2, 2, 0), (3, 4, 1), (4, 2, 0), (4, 3, 3)])
def test_closed_forms_match_definitions(primitive, n, k, root):
    want = definition(primitive, n, k, root)
    for r in range(n):
        got = P.expected(primitive, r, n, k, root=root)
        assert (got is None and want[r] is None) or got.tolist() == want[r], (primitive, r)


def test_inputs_are_readable():
    # the tens digit says where a value came from
    assert P.rank_input("all_reduce", 3, 4, 2).tolist() == [31.0, 32.0]
    assert P.expected("all_to_all", 2, 3, 1).tolist() == [2.0, 12.0, 22.0]
    assert set(P.PRIMITIVES) == set(P.DESCRIPTIONS) == set(P.EQUIVALENTS)


def test_barrier_verdict():
    good = [BarrierTiming(r, 0.2 * r, 0.2 * r, 0.6, 0.6 - 0.2 * r) for r in range(4)]
    assert P.barrier_ok(good, 0.2)
    early = [replace(g) for g in good]
    early[0].leave_s = 0.1  # rank 0 left before rank 3 arrived: not a barrier
    assert not P.barrier_ok(early, 0.2)
    assert not P.barrier_ok(good[:3], 0.3)  # the slowest rank did not work (n−1)·delay: it was not slow


def test_barrier_verdict_on_one_hosts_clock_ignores_late_scheduling():
    """On one host the ranks share a clock: rank 0, scheduled 0.3 s late after the initial barrier
    (so its own times are shifted), still passes when everyone left after the last arrival."""
    rows = []
    for r in range(4):
        start = 100.0 + (0.3 if r == 0 else 0.0)  # rank 0 left the initial barrier late
        arrive = start + 0.2 * r
        rows.append(BarrierTiming(r, 0.2 * r, arrive - start, 100.65 - start, 100.65 - arrive, "h", arrive, 100.65))
    per_rank = [replace(r, host=None, arrive_clock_s=None, leave_clock_s=None) for r in rows]
    assert not P.barrier_ok(per_rank, 0.2)  # each rank's own clock makes rank 0 look as if it left early
    assert P.barrier_ok(rows, 0.2)
    assert not P.barrier_ok([replace(r, host=f"h{r.rank}") for r in rows], 0.2)  # hosts apart: own clocks again
    rows[1].leave_clock_s = 100.5  # left before rank 3 arrived on the shared clock
    assert not P.barrier_ok(rows, 0.2)


def test_unsupported_detection():
    assert P.is_unsupported(RuntimeError("ProcessGroupGloo does not support reduce_scatter"))
    assert not P.is_unsupported(RuntimeError("Connection closed by peer"))


# ----------------------------------------------------------------------------- collectives: the fallback
def test_check_all_runs_the_equivalent_where_the_backend_lacks_a_primitive(one_rank):
    def lacking(primitive, *a, **kw):
        if primitive == "reduce_scatter":
            raise RuntimeError("ProcessGroupGloo does not support reduce_scatter\nmore detail")
        return P.call_native(primitive, *a, **kw)

    out = P.check_all(0, 1, check_k=8, primitives=("reduce_scatter", "all_reduce"), native=lacking)
    rs = out["reduce_scatter"]
    assert rs.native is False and rs.native_error == "ProcessGroupGloo does not support reduce_scatter"
    assert rs.ok is True and rs.equivalent_ok is True and rs.seconds is None
    assert out["all_reduce"].native is True and out["all_reduce"].ok is True
    assert P.PrimitiveCheck.from_json(to_json(rs)) == rs  # what a rank's result file holds reads back the same


def test_check_all_lets_a_real_failure_through(one_rank):
    def broken(*a, **kw):
        raise RuntimeError("Connection closed by peer")

    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        P.check_all(0, 1, check_k=8, primitives=("all_reduce",), native=broken)


def test_collectives_unknown_primitive_names_the_known_ones():
    for fn in (P.rank_input, P.expected):
        with pytest.raises(KeyError, match="one of broadcast, reduce"):
            fn("allreduce", 0, 2, 2)
    for fn in (P.call_native, P.call_equivalent):
        with pytest.raises(KeyError):
            fn("allreduce", torch.zeros(2), 0, 2, 2, 0)
