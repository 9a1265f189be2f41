"""Lab 06: its checks accept the reference answer and reject each plausible mistake with a hint."""

from __future__ import annotations

import time

import matplotlib
import pytest  # noqa: E402
import torch.distributed as dist  # noqa: F401

from perflab.distributed import collectives as C  # noqa: E402
from perflab.distributed import lab06 as lab  # noqa: E402
from perflab.distributed.torchrun import BackendChoice, LaunchResult, RankOutcome  # noqa: E402
from perflab.grading import checks as grading  # noqa: E402
from perflab.grading.checks import LabCheckError  # noqa: E402

matplotlib.use("Agg")


# ----------------------------------------------------------------------------- lab 06, from a made-up job
def ring_ok(x, rank, world_size):
    return x.clone()


def _job(rows_per_rank, ok=True):
    ranks = [RankOutcome(r, "ok" if ok else ("raised" if r == 1 else "stopped"),
                         error=None if ok or r != 1 else "RuntimeError: Connection closed by peer",
                         stderr="" if ok or r != 1 else "Traceback...\nRuntimeError: Connection closed by peer",
                         result={"rank": r, "rows": rows} if ok else None)
             for r, rows in enumerate(rows_per_rank)]
    return LaunchResult("perflab.distributed.workers.lab06_ring", len(ranks), 1, BackendChoice("gloo", "cpu", "test"), [],
                        1.0, 60.0, False, [0 if ok else 1], ranks=ranks)


def _row(k, n, rank, **kw):
    row = {"numel": k, "collectives": [], "shape_ok": True, "max_rel_error": 0.0, "returned": "Tensor",
           "bytes_sent": C.ring_bytes_sent(k, n, 4)[rank]}
    row.update(kw)
    return row


def stub(x, rank, world_size):
    raise NotImplementedError


def uses_a_collective(x, rank, world_size):
    out = x.clone()
    dist.all_reduce(out)
    return out


def ring_ref(numel, world_size, itemsize):
    return 2 * (world_size - 1) * numel / world_size * itemsize


def ring_large_n(numel, world_size, itemsize):
    return 2 * numel * itemsize


def ring_one_phase(numel, world_size, itemsize):
    return (world_size - 1) * numel / world_size * itemsize


def ring_ignores_itemsize(numel, world_size, itemsize):
    return 2 * (world_size - 1) * numel / world_size


def ring_off_by_one(numel, world_size, itemsize):
    return (2 * world_size - 1) * numel / world_size * itemsize


def ring_floor_division(numel, world_size, itemsize):
    return 2 * (world_size - 1) * (numel // world_size) * itemsize


def ring_naive_root(numel, world_size, itemsize):
    return 2 * (world_size - 1) * numel * itemsize


def ring_visible_only(numel, world_size, itemsize):  # right for the divisible sizes, 0 otherwise
    return ring_ref(numel, world_size, itemsize) if numel % world_size == 0 else 0.0


def ring_calls_perflab(numel, world_size, itemsize):
    from perflab.distributed.collectives import ring_bytes_formula

    return ring_bytes_formula(numel, world_size, itemsize)


FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
           "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}


def busbw_ref(op, nbytes, seconds, ranks):
    return nbytes / seconds / 1e9 * FACTORS[op](ranks)


def busbw_algbw(op, nbytes, seconds, ranks):
    return nbytes / seconds / 1e9


def busbw_gib(op, nbytes, seconds, ranks):
    return nbytes / seconds / 2**30 * FACTORS[op](ranks)


def busbw_allreduce_factor_everywhere(op, nbytes, seconds, ranks):
    return nbytes / seconds / 1e9 * 2 * (ranks - 1) / ranks


def busbw_divides(op, nbytes, seconds, ranks):
    return nbytes / seconds / 1e9 / FACTORS[op](ranks)


def busbw_broadcast_wrong(op, nbytes, seconds, ranks):
    f = (ranks - 1) / ranks if op == "broadcast" else FACTORS[op](ranks)
    return nbytes / seconds / 1e9 * f


def busbw_allreduce_missing_term(op, nbytes, seconds, ranks):
    f = (ranks - 1) / ranks if op == "all_reduce" else FACTORS[op](ranks)
    return nbytes / seconds / 1e9 * f


def busbw_calls_perflab(op, nbytes, seconds, ranks):
    from perflab.distributed import busbw

    return busbw.busbw_gbps(op, nbytes, seconds, ranks)


@pytest.mark.parametrize("broken, message", [
    (None, "did not finish on 2 ranks: rank 1 raised RuntimeError: Connection closed by peer"),
    ({"shape_ok": False, "returned": "NoneType", "shape": None}, "rank 1 returned NoneType None for an input of 8"),
    ({"max_rel_error": 0.5}, "rank 1's result differs from dist.all_reduce by 5.00e-01"),
    ({"bytes_sent": 64}, "rank 1 sent 64 B for 8 float32 elements; a ring sends"),
])
def test_lab06_verdicts_name_the_mistake(monkeypatch, broken, message):
    import perflab.distributed.torchrun

    n, k = 2, 8
    per_rank = [[_row(k, n, 0)], [_row(k, n, 1, **(broken or {}))]]
    job = _job(per_rank, ok=broken is not None)
    monkeypatch.setattr(perflab.distributed.torchrun, "launch", lambda *a, **kw: job)
    with pytest.raises(LabCheckError, match=message.replace("(", r"\(").replace(")", r"\)")):
        lab.check_ring_all_reduce(ring_ok, nproc=n, numels=(k,))


def test_lab06_passes_a_right_ring(monkeypatch, capsys):
    import perflab.distributed.torchrun

    n = 2
    job = _job([[_row(k, n, r) for k in (8, 4)] for r in range(n)])
    monkeypatch.setattr(perflab.distributed.torchrun, "launch", lambda *a, **kw: job)
    grading.reset()
    assert lab.check_ring_all_reduce(ring_ok, nproc=n, numels=(8, 4))
    out = capsys.readouterr().out
    assert "✓ ring_all_reduce on 2 ranks: equals dist.all_reduce on every rank (8 and 4 elements)" in out
    assert f"{C.ring_bytes_sent(8, 2, 4)[0]} B sent per rank for 8 elements" in out


def test_lab06_function_without_source_is_refused():
    namespace: dict = {}
    exec("def ring(x, rank, world_size):\n    return x.clone()\n", namespace)  # no file behind it
    with pytest.raises(LabCheckError, match="could not read its source; define it with `def`"):
        lab.check_ring_all_reduce(namespace["ring"], nproc=2)


def test_stub_is_not_done_and_starts_no_rank(monkeypatch):
    import perflab.distributed.torchrun

    def no_launch(*a, **k):
        raise AssertionError("a stub must not start any rank")

    monkeypatch.setattr(perflab.distributed.torchrun, "launch", no_launch)
    grading.reset()
    t0 = time.time()
    assert not lab.check_ring_all_reduce(stub)
    assert time.time() - t0 < 5
    assert grading.summary()["ring_all_reduce on 4 ranks"] == "not done"


def test_traffic_and_busbw_checks():
    grading.reset()
    assert lab.check_ring_bytes(lambda numel, world_size, itemsize: 2 * (world_size - 1) * numel / world_size * itemsize)
    with pytest.raises(LabCheckError, match="ring bytes per rank"):
        lab.check_ring_bytes(lambda numel, world_size, itemsize: 2 * numel * itemsize)  # the large-N limit, not exact
    with pytest.raises(LabCheckError, match="bus bandwidth"):
        lab.check_busbw(lambda op, nbytes, seconds, ranks: nbytes / seconds / 1e9)  # algbw, not busbw
    assert lab.check_busbw(lambda op, nbytes, seconds, ranks: nbytes / seconds / 1e9 * {
        "all_reduce": 2 * (ranks - 1) / ranks, "broadcast": 1.0}.get(op, (ranks - 1) / ranks))


@pytest.mark.slow
def test_a_ring_made_of_all_reduce_is_refused():
    with pytest.raises(LabCheckError, match="called all_reduce: build the ring from point-to-point sends"):
        lab.check_ring_all_reduce(uses_a_collective, nproc=2)


def test_reference_answers_pass():
    assert lab.check_ring_bytes(ring_ref)
    assert lab.check_busbw(busbw_ref)


@pytest.mark.parametrize("mutant, kind", [
    (ring_large_n, "large-N limit"), (ring_one_phase, "one phase only"), (ring_ignores_itemsize, "not bytes"),
    (ring_off_by_one, "off-by-one"), (ring_floor_division, "integer division"), (ring_naive_root, "naive root"),
    (ring_visible_only, "Hint: each of the 2·(N−1) steps"), (ring_calls_perflab, "perflab's own ring_bytes_formula"),
])
def test_ring_bytes_mutants_are_refused_by_kind(mutant, kind):
    with pytest.raises(LabCheckError, match="ring bytes per rank") as e:
        lab.check_ring_bytes(mutant)
    assert kind in str(e.value)


@pytest.mark.parametrize("mutant, kind", [
    (busbw_algbw, "algorithm bandwidth"), (busbw_gib, "GiB/s"), (busbw_allreduce_factor_everywhere, "for every op"),
    (busbw_divides, "inverted factor"), (busbw_broadcast_wrong, "broadcast with"),
    (busbw_allreduce_missing_term, "all-reduce with (n−1)/n"), (busbw_calls_perflab, "perflab's own busbw_gbps"),
])
def test_busbw_mutants_are_refused_by_kind(mutant, kind):
    with pytest.raises(LabCheckError, match="bus bandwidth") as e:
        lab.check_busbw(mutant)
    assert kind in str(e.value)


# ----------------------------------------------------------------------------- lab 06 as perflab grade's judge grades it
def _run(inputs, *, out=None, sent=None, collectives=(), error=None, message=""):
    """A ring run as classroom/ranks.py reports it: each rank's results and the bytes the judge counted."""
    import torch

    from perflab.classroom.ranks import RankReport, RankRun
    from perflab.distributed.ring import ring_bytes_sent

    n = len(inputs)
    ranks = []
    for r in range(n):
        sums = [sum(inp[i] for inp in inputs) for i in range(len(inputs[r]))]
        ranks.append(RankReport(r, outputs=out(r, sums) if out else sums, returned=["Tensor"] * len(sums),
                                bytes_sent=sent(r) if sent else [ring_bytes_sent(x.numel(), n, 4)[r] for x in inputs[r]],
                                collectives=list(collectives) if r == 0 else [], error=error if r == 1 else None,
                                finished=True))
    assert torch is not None
    return RankRun(ranks, message)


def test_the_judge_grades_the_ring_from_what_it_counted_and_summed_itself():
    import torch

    inputs = [[torch.randn(8), torch.randn(4)] for _ in range(2)]
    grading.reset()
    assert lab.judge_ring(_run(inputs), inputs, "ring")
    cases = [(dict(sent=lambda r: [0, 0]), "sent 0 B"), (dict(collectives=["all_reduce"]), "called all_reduce"),
             (dict(out=lambda r, sums: [2 * s for s in sums]), "differs from the sum over the ranks"),
             (dict(error="ValueError: boom"), "rank 1 ValueError: boom"),
             (dict(message="did not finish within 60 s"), "did not finish within 60 s")]
    for kw, words in cases:
        with pytest.raises(LabCheckError, match=words):
            lab.judge_ring(_run(inputs, **kw), inputs, "ring")
