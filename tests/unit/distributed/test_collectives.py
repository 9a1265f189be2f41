"""Tests of `perflab.distributed.collectives`."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import matplotlib
import pytest
import torch

from perflab.core.errors import InputError  # noqa: E402
from perflab.distributed import collectives as C
from perflab.distributed import torchrun

from .helpers import assert_all_gone


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


matplotlib.use("Agg")


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
    assert not C.barrier_ok(good[:3], 0.3)  # the slowest rank did not work (n−1)·delay: it was not slow


def test_barrier_verdict_on_one_hosts_clock_ignores_late_scheduling():
    """On one host the ranks share a clock: rank 0, scheduled 0.3 s late after the initial barrier
    (so its own times are shifted), still passes when everyone left after the last arrival."""
    rows = []
    for r in range(4):
        start = 100.0 + (0.3 if r == 0 else 0.0)  # rank 0 left the initial barrier late
        arrive = start + 0.2 * r
        rows.append({"rank": r, "arrive_s": arrive - start, "leave_s": 100.65 - start, "host": "h",
                     "arrive_clock_s": arrive, "leave_clock_s": 100.65})
    per_rank = [{k: r[k] for k in ("rank", "arrive_s", "leave_s")} for r in rows]
    assert not C.barrier_ok(per_rank, 0.2)  # each rank's own clock makes rank 0 look as if it left early
    assert C.barrier_ok(rows, 0.2)
    assert not C.barrier_ok([{**r, "host": f"h{r['rank']}"} for r in rows], 0.2)  # hosts apart: own clocks again
    rows[1]["leave_clock_s"] = 100.5  # left before rank 3 arrived on the shared clock
    assert not C.barrier_ok(rows, 0.2)


def test_unsupported_detection():
    assert C.is_unsupported(RuntimeError("ProcessGroupGloo does not support reduce_scatter"))
    assert not C.is_unsupported(RuntimeError("Connection closed by peer"))


# ----------------------------------------------------------------------------- collectives: the fallback
def test_check_all_runs_the_equivalent_where_the_backend_lacks_a_primitive(one_rank, monkeypatch):
    native = C._native

    def lacking(primitive, *a, **kw):
        if primitive == "reduce_scatter":
            raise RuntimeError("ProcessGroupGloo does not support reduce_scatter\nmore detail")
        return native(primitive, *a, **kw)

    monkeypatch.setattr(C, "_native", lacking)
    out = C.check_all(0, 1, check_k=8, primitives=("reduce_scatter", "all_reduce"))
    rs = out["reduce_scatter"]
    assert rs["native"] is False and rs["native_error"] == "ProcessGroupGloo does not support reduce_scatter"
    assert rs["ok"] is True and rs["equivalent_ok"] is True and rs["seconds"] is None
    assert out["all_reduce"]["native"] is True


def test_check_all_lets_a_real_failure_through(one_rank, monkeypatch):
    def broken(*a, **kw):
        raise RuntimeError("Connection closed by peer")

    monkeypatch.setattr(C, "_native", broken)
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        C.check_all(0, 1, check_k=8, primitives=("all_reduce",))


# ----------------------------------------------------------------------------- collectives
def test_collectives_unknown_primitive_names_the_known_ones():
    for fn in (C.rank_input, C.expected):
        with pytest.raises(KeyError, match="one of broadcast, reduce"):
            fn("allreduce", 0, 2, 2)
    for fn in (C._native, C._equivalent):
        with pytest.raises(KeyError):
            fn("allreduce", torch.zeros(2), 0, 2, 2, 0)


def test_summarize_skips_primitives_nobody_ran():
    entry = {"native": True, "ok": True, "equivalent_ok": True, "native_error": None}
    df = C.summarize([{"primitives": {"all_reduce": entry}}, {"primitives": {"all_reduce": entry}}])
    assert list(df["primitive"]) == ["all_reduce"]


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
    results = [{"primitives": {p: {"demo": {"before": C.rank_input(p, r, n, k).tolist(),
                                            "after": (C.expected(p, r, n, k) if C.expected(p, r, n, k) is not None
                                                      else C.rank_input(p, r, n, k)).tolist(),
                                            "expected": None if C.expected(p, r, n, k) is None
                                            else C.expected(p, r, n, k).tolist(), "ok": True}}
                               for p in C.PRIMITIVES[:-1]}} for r in range(n)]
    df = C.demo_frame(results)
    assert len(df) == n * (len(C.PRIMITIVES) - 1)
    assert df.loc[("gather", 1), "expected"] == "(unspecified)"
    assert df.loc[("all_gather", 0), "after"] == "[1, 2, 11, 12]"


def test_plot_barrier_shows_work_then_wait():
    rows = [{"rank": 1, "arrive_s": 0.2, "waited_s": 0.0, "leave_s": 0.2},
            {"rank": 0, "arrive_s": 0.0, "waited_s": 0.2, "leave_s": 0.2}]
    fig = C.plot_barrier(rows, title="barrier")
    ax = fig.axes[0]
    assert ax.get_title() == "barrier" and ax.get_xlabel() == "time since the start (s)"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank 0", "rank 1"]
    assert len(ax.patches) == 4  # working and waiting, per rank
    assert ax.get_lines()[0].get_xdata()[0] == pytest.approx(0.2)  # the slowest arrival


def test_plot_traffic_ring_against_a_root():
    fig = C.plot_traffic(2**20, ns=(2, 4, 8), measured={4: C.ring_bytes_formula(2**20, 4, 4)})
    ax = fig.axes[0]
    assert ax.get_ylabel() == "bytes sent per rank (MiB)" and ax.get_xlabel() == "ranks N"
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["ring: 2(N−1)K/N per rank"].get_ydata()) == pytest.approx([4.0, 6.0, 7.0])
    assert list(lines["through a root: 2(N−1)K on the root's link"].get_ydata()) == pytest.approx([8.0, 24.0, 56.0])
    assert list(lines["measured here, N=4"].get_ydata()) == pytest.approx([6.0])


@pytest.mark.slow
def test_every_primitive_gloo_2_ranks():
    rep = C.run_all(2, backend="gloo", timeout=240, check_k=1024, slow_s=0.15, ring_numel=1000)
    assert rep.launch.ok, rep.launch.report()
    s = rep.summary
    assert list(s["primitive"]) == list(C.PRIMITIVES) and s["ok"].all() and s["equivalent_ok"].all()
    assert rep.ok and rep.ring_ok
    for r in rep.ring_rows():  # uneven chunks: 1000 = 500 + 500 here; bytes as scheduled
        assert r["bytes_sent"] == r["bytes_exact"] == C.ring_bytes_sent(1000, 2, 4)[r["rank"]]
    timing = rep.barrier_rows()
    assert C.barrier_ok(timing, 0.15) and len({r["host"] for r in timing}) == 1  # checked on the shared clock
    # demos show what each rank held: broadcast from rank 0
    t = C.demo_table(rep.results, "broadcast")
    assert list(t["after"]) == ["[1, 2]", "[1, 2]"] and t["ok"].all()
    # nothing listened anywhere but on loopback (ranks and their torchrun agent)
    for r in rep.results:
        assert r["listening"], "no socket seen: the check itself did not work"
        assert all(a.startswith(("127.", "::1", "[::1]")) for a in r["listening"]), r["listening"]
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
    assert rep.launch.backend.name == "nccl" and rep.results[0]["device"].startswith("cuda")
    res = torchrun.launch("perflab.distributed.workers.ddp", n, ["--experiments", "init_memory"], timeout=300, backend="nccl")
    assert res.ok, res.report()
    stages = res.results[0]["init_memory"]["stages"]
    assert stages[-1]["gpu_used_bytes"] > stages[0]["gpu_used_bytes"]  # joining costs device memory
