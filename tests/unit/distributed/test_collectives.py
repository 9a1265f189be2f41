"""Tests of `perflab.distributed.collectives`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import matplotlib
import pytest

from perflab.core.errors import InputError
from perflab.core.jsonable import to_json
from perflab.distributed import collectives as C
from perflab.distributed import torchrun
from perflab.distributed.outcome import BackendChoice, LaunchResult, RankOutcome

from .helpers import assert_all_gone

matplotlib.use("Agg")


def _report(rank: int, primitives: dict) -> C.RankReport:
    return C.RankReport(rank, 2, rank, 0, "gloo", "cpu", primitives)


def test_summarize_skips_primitives_nobody_ran():
    entry = C.PrimitiveCheck(C.EQUIVALENTS["all_reduce"], True, None, C.PrimitiveRun([1.0], [3.0], [3.0], True, 0.1),
                             True, 0.2, 8, True)
    df = C.summarize([_report(0, {"all_reduce": entry}), _report(1, {"all_reduce": entry})])
    assert list(df["primitive"]) == ["all_reduce"] and df["ok"].all()
    assert C.summarize([to_json(_report(0, {"all_reduce": entry})), None])["ok"].tolist() == [False]  # a rank said nothing


def test_run_all_rejects_a_slow_rank_delay_out_of_range():
    with pytest.raises(InputError, match="slow_s must be between 0 and 10 seconds"):
        C.run_all(2, slow_s=11)


def test_predictions_table_holds_the_closed_forms():
    df = C.predictions(2, k=2)
    assert df.loc[("all_reduce", 1), "must hold after"] == "[12, 14]"  # (1+11, 2+12)
    assert df.loc[("reduce", 1), "must hold after"] == "(unspecified)"
    assert df.loc[("scatter", 0), "holds before"] == "[1, 2, 3, 4]"
    assert len(df) == 2 * (len(C.PRIMITIVES) - 1)


def test_demo_frame_stacks_every_primitive():
    n, k = 2, 2

    def demo(p, r):
        want = C.expected(p, r, n, k)
        after = (want if want is not None else C.rank_input(p, r, n, k)).tolist()
        run = C.PrimitiveRun(C.rank_input(p, r, n, k).tolist(), after, None if want is None else want.tolist(), True, 0.0)
        return C.PrimitiveCheck(C.EQUIVALENTS[p], True, None, run, True, 0.0, k, True)

    reports = [_report(r, {p: demo(p, r) for p in C.PRIMITIVES[:-1]}) for r in range(n)]
    df = C.demo_frame(reports)
    assert df.equals(C.demo_frame([to_json(r) for r in reports]))  # the ranks' result files read the same
    assert len(df) == n * (len(C.PRIMITIVES) - 1)
    assert df.loc[("gather", 1), "expected"] == "(unspecified)"
    assert df.loc[("all_gather", 0), "after"] == "[1, 2, 11, 12]"


def test_plot_barrier_shows_work_then_wait():
    rows = [C.BarrierTiming(1, 0.2, 0.2, 0.2, 0.0), C.BarrierTiming(0, 0.0, 0.0, 0.2, 0.2)]
    fig = C.plot_barrier(rows, title="barrier")
    ax = fig.axes[0]
    assert ax.get_title() == "barrier" and ax.get_xlabel() == "time since the start (s)"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1"]
    assert len(ax.patches) == 4  # working and waiting, per rank
    assert ax.get_lines()[0].get_xdata()[0] == pytest.approx(0.2)  # the slowest arrival


@pytest.mark.slow
def test_every_primitive_gloo_2_ranks():
    rep = C.run_all(2, backend="gloo", timeout=240, check_k=1024, slow_s=0.15, ring_numel=1000)
    assert rep.launch.ok, rep.launch.report()
    s = rep.summary
    assert list(s["primitive"]) == list(C.PRIMITIVES) and s["ok"].all() and s["equivalent_ok"].all()
    assert rep.ok and rep.ring_ok
    for rank, r in rep.ring_rows():  # uneven chunks: 1000 = 500 + 500 here; bytes as scheduled
        assert r.bytes_sent == r.bytes_exact == C.ring_bytes_sent(1000, 2, 4)[rank]
    assert list(rep.ring_table().index) == [0, 1]
    timing = rep.barrier_rows()
    assert C.barrier_ok(timing, 0.15) and len({r.host for r in timing}) == 1  # checked on the shared clock
    # demos show what each rank held: broadcast from rank 0
    t = C.demo_table(rep.reports, "broadcast")
    assert list(t["after"]) == ["[1, 2]", "[1, 2]"] and t["ok"].all()
    # nothing listened anywhere but on loopback (ranks and their torchrun agent)
    for r in rep.reports:
        assert r is not None and r.listening, "no socket seen: the check itself did not work"
        assert all(a.startswith(("127.", "::1", "[::1]")) for a in r.listening), r.listening
    assert_all_gone(rep.launch)


@pytest.mark.slow
def test_every_primitive_gloo_4_ranks_cli_json():
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "perflab", "collectives", "--nproc", "4", "--backend", "gloo", "--json",
                        "--elements", "2048", "--slow-s", "0.1"], capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads(r.stdout)
    assert d["ok"] and d["nproc"] == 4 and d["backend"] == "gloo"
    assert [p["primitive"] for p in d["primitives"]] == list(C.PRIMITIVES)
    assert all(p["ok"] and p["equivalent_ok"] for p in d["primitives"])
    ring = d["ring_all_reduce"]
    assert ring["ok"] and all(x["bytes_sent"] == 2 * 3 * 2048 // 4 * 4 for x in ring["ranks"])
    assert d["barrier_with_slow_ranks"]["ok"]
    assert time.time() - t0 < 400


@pytest.mark.slow
def test_launch_from_a_plain_script_without_a_main_guard(tmp_path):
    """A user's script that calls launch at its top level: multiprocessing would run it again in a
    forked agent, so agents start as plain processes there."""
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent("""
        from perflab.distributed import agent, torchrun
        res = torchrun.launch("perflab.distributed.workers.faulty", 2, timeout=120)
        print("forked agents:", agent.can_fork_agents(), "ok:", res.ok, "sums:", [r["sum"] for r in res.results])
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180,
                       env={**os.environ, "PYTHONPATH": str(Path(C.__file__).parents[2])})
    assert "forked agents: False ok: True sums: [[3.0, 3.0, 3.0, 3.0], [3.0, 3.0, 3.0, 3.0]]" in r.stdout, r.stdout + r.stderr


@pytest.mark.gpu
def test_nccl_path_runs_on_gpus():
    import torch

    n = torch.cuda.device_count()
    rep = C.run_all(n, backend="nccl", timeout=300, check_k=4096, slow_s=0.1, ring_numel=4096)
    assert rep.ok, rep.launch.report()
    assert rep.launch.backend.name == "nccl" and str(getattr(rep.reports[0], "device", "")).startswith("cuda")
    res = torchrun.launch("perflab.distributed.workers.ddp", n, ["--experiments", "init_memory"], timeout=300, backend="nccl")
    assert res.ok, res.report()
    stages = res.results[0]["init_memory"]["stages"]
    assert stages[-1]["gpu_used_bytes"] > stages[0]["gpu_used_bytes"]  # joining costs device memory



def test_barrier_and_ring_verdicts_without_rows():
    assert C.barrier_ok([], 0.2) is False
    launch = LaunchResult("perflab.distributed.workers.collectives", 2, 1, BackendChoice("gloo", "cpu", "test"), [], 1.0,
                          60.0, False, [1], ranks=[RankOutcome(0, "raised", error="ValueError: boom"),
                                                   RankOutcome(1, "stopped")])
    run = C.CollectivesRun(launch, 0.2)
    assert run.ring_ok is None  # no rank reported its ring check
    assert len(run.summary) == 0
    d = run.as_dict()
    assert d["ok"] is False and d["primitives"] == []
    assert [r["status"] for r in d["ranks"]] == ["raised", "stopped"]


def _run_with(reports, ring=None, barrier=None):
    results = []
    for i, r in enumerate(reports):
        d = {"rank": i, "world_size": len(reports), "local_rank": i, "node": 0, "backend": "gloo", "device": "cpu",
             "primitives": {p: to_json(e) for p, e in r.primitives.items()}}
        if ring:
            d["ring"] = ring[i]
        if barrier:
            d["barrier_timing"] = barrier[i]
        results.append(d)
    ranks = [RankOutcome(i, "ok", result=d) for i, d in enumerate(results)]
    return C.CollectivesRun(LaunchResult("t", len(results), 1, BackendChoice("gloo", "cpu", "test"), [], 1.0, 60.0, False,
                                         [0], ranks=ranks), 0.1)


def _check(native=True):
    demo = C.PrimitiveRun([1.0], [1.0], [1.0], True, 0.001)
    return C.PrimitiveCheck("eq", native, None if native else "not supported", demo, True, 0.001, 8, True)


def test_the_lessons_tables_read_for_a_person():
    ring = [{"numel": 4096, "max_rel_error": 0.0, "ok": True, "bytes_sent": 16384, "sends": 2, "bytes_formula": 16384.0,
             "bytes_exact": 16384, "seconds": 0.01}] * 2
    barrier = [{"rank": 0, "work_s": 0.0, "arrive_s": 0.0004, "leave_s": 0.101, "waited_s": 0.1006},
               {"rank": 1, "work_s": 0.1, "arrive_s": 0.1, "leave_s": 0.102, "waited_s": 0.0015}]
    prims = {p: _check(native=p != "all_to_all") for p in C.PRIMITIVES}
    run = _run_with([_report(0, prims), _report(1, prims)], ring, barrier)
    t = run.table()
    assert t.loc["broadcast", "every rank right"] == "yes" and t.loc["all_to_all", "native in this backend"] == "no"
    assert "all_to_all (ran its equivalent: N scatters, one from each rank)" in run.native_line()
    assert run.longest_wait().rank == 0
    bt = run.barrier_table()
    assert bt.loc[0, "waited"] == "101 ms" and bt.loc[1, "work"] == "100 ms"
    rv = run.ring_view()
    assert rv.loc[0, "bytes sent"] == "16,384" and rv.loc[1, "bytes by the formula"] == "16,384"
    fig = run.traffic_figure()
    assert fig is not None and fig.axes
    assert run.verdict().startswith("every primitive checked out on 2 ranks (gloo)")


def test_a_failed_run_says_where_to_look():
    run = C.CollectivesRun(LaunchResult("t", 2, 1, BackendChoice("gloo", "cpu", "test"), [], 1.0, 60.0, False, [1],
                                        ranks=[RankOutcome(0, "raised"), RankOutcome(1, "stopped")]), 0.2)
    assert run.verdict() == "not every primitive checked out on 2 ranks (gloo): see the report above"
    assert run.longest_wait() is None and run.traffic_figure() is None and len(run.table()) == 0
