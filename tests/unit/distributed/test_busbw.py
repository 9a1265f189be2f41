"""Tests of `perflab.distributed.busbw`."""

from __future__ import annotations

import datetime
import json
import multiprocessing as mp
import os
import subprocess
import sys

import matplotlib
import matplotlib.pyplot as plt  # noqa: E402
import pytest
import torch
import torch.distributed as dist

from perflab.core.errors import InputError
from perflab.distributed import busbw as B
from perflab.distributed.torchrun import BackendChoice, LaunchResult, RankOutcome  # noqa: E402

CPU = torch.device("cpu")


def _send_recv_peer(store: str) -> None:
    code = 1
    try:
        dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=1, world_size=2,  # pyright: ignore[reportPrivateImportUsage]  # public, documented; absent from __all__
                                timeout=datetime.timedelta(seconds=30))
        _run, check = B.make_op("send_recv", 64, 2, 1, CPU)
        code = 0 if check() else 3
        dist.destroy_process_group()
    finally:
        sys.stdout.flush()
        os._exit(code)


matplotlib.use("Agg")


def _fake_busbw_launch(lines, ok):
    """A torchrun job that wrote `lines` to the worker's --out file and finished (ok) or not."""
    def launch(target, nproc, args, **kw):
        out = args[args.index("--out") + 1]
        with open(out, "w") as f:
            f.write("".join(line + "\n" for line in lines))
        ranks = [RankOutcome(r, "ok" if ok else ("raised" if r == 1 else "stopped"),
                             error=None if ok or r != 1 else "RuntimeError: Connection closed by peer")
                 for r in range(nproc)]
        return LaunchResult(target, nproc, 1, BackendChoice("gloo", "cpu", "test"), [], 1.0, 60.0, False,
                            [0 if ok else 1], ranks=ranks)
    return launch


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16, 64])
def test_factors_match_nccl_tests(n):
    # doc/PERFORMANCE.md, section "Summary"
    assert B.bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    for op in ("reduce_scatter", "all_gather", "all_to_all", "gather", "scatter"):
        assert B.bus_factor(op, n) == pytest.approx((n - 1) / n), op
    for op in ("broadcast", "reduce", "send_recv"):
        assert B.bus_factor(op, n) == 1.0, op


def test_published_nccl_tests_rows_reproduced():
    # NVIDIA/nccl-tests issue #232: all_reduce_perf, 2 ranks (one H100 per node, -np 2 -g 1):
    #   33554432 B, 812.3 us -> algbw 41.31, busbw 41.31 GB/s (factor 2(n-1)/n = 1 for n = 2)
    d = B.convert("all_reduce", 33554432, 812.3e-6, 2)
    assert round(d.algbw_gbps, 2) == 41.31 and round(d.busbw_gbps, 2) == 41.31
    # kvcache-ai/Mooncake PR #3484 (an 8-GPU all_reduce_perf run): 33554432 B, 195.40 us ->
    #   algbw 171.72, busbw 300.51 GB/s; 300.51 / 171.72 = 1.75 = 2·7/8, the factor for 8 ranks
    d = B.convert("all_reduce", 33554432, 195.40e-6, 8)
    assert round(d.algbw_gbps, 2) == 171.72 and round(d.busbw_gbps, 2) == 300.51


def test_convert_units_and_fields():
    d = B.convert("AllGather", 2**30, 0.5, 4)
    assert d.op == "all_gather" and d.factor == 0.75
    assert d.algbw_gbps == pytest.approx(2**30 / 0.5 / 1e9)
    assert d.busbw_gbps == pytest.approx(d.algbw_gbps * 0.75)
    assert "gathered output" in d.size_means
    assert d.text() == ("all_gather of S = 1073741824 B in 0.5 s on 4 ranks: algbw = S/t = 2.147 GB/s; "
                        "busbw = algbw × (n−1)/n (0.75) = 1.611 GB/s")


@pytest.mark.parametrize("name,want", [("allreduce", "all_reduce"), ("All-Reduce", "all_reduce"),
                                       ("reducescatter", "reduce_scatter"), ("alltoall", "all_to_all"),
                                       ("bcast", "broadcast"), ("sendrecv", "send_recv")])
def test_op_names(name, want):
    assert B.normalize_op(name) == want


@pytest.mark.parametrize("call,needle", [
    (lambda: B.normalize_op("allsum"), "unknown collective"),
    (lambda: B.convert("all_reduce", 0, 1.0, 2), "bytes must be > 0"),
    (lambda: B.convert("all_reduce", 10, 0.0, 2), "seconds must be"),
    (lambda: B.convert("all_reduce", 10, 1.0, 1), "at least 2 ranks"),
    (lambda: B.check_size("all_gather", 1000, 3), "try 996 or 1008"),
    (lambda: B.check_size("all_reduce", 1001, 3), "multiple of 4 B"),
    (lambda: B.parse_size("12 parsecs"), "not understood"),
    (lambda: B.parse_size("0"), "≥ 1 byte"),
])
def test_bad_input_one_line(call, needle):
    with pytest.raises(InputError) as e:
        call()
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_sizes():
    assert B.parse_size("64K") == 65536 and B.parse_size("1M") == 2**20 and B.parse_size("4096") == 4096
    sizes = B.default_sizes("all_gather", 3)
    assert all(s % 12 == 0 for s in sizes) and sizes == sorted(sizes)
    assert B.size_label(3 * 2**20) == "3 MiB"


def test_factor_table_lists_every_op():
    t = B.factor_table()
    assert list(t.index) == list(B.OPS) and t.loc["all_reduce", "n=8"] == 1.75


def test_cli_convert_json():
    r = subprocess.run([sys.executable, "-m", "perflab", "busbw", "--op", "reduce_scatter", "--bytes", "1048576",
                        "--seconds", "0.001", "--ranks", "4", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["algbw_gbps"] == pytest.approx(1.048576) and d["busbw_gbps"] == pytest.approx(1.048576 * 0.75)
    assert list(d) == ["op", "bytes", "seconds", "ranks", "factor", "factor_formula", "algbw_gbps", "busbw_gbps",
                       "size_means"]


@pytest.mark.parametrize("args,needle", [
    (["--bytes", "100", "--seconds", "1"], "all three"),
    (["--op", "nope", "--bytes", "1", "--seconds", "1", "--ranks", "2"], "unknown collective"),
    (["--op", "all_gather", "--nproc", "3", "--sizes", "1000"], "try 996 or 1008"),
    (["--bytes", "0", "--seconds", "1", "--ranks", "2"], "≥ 1"),
])
def test_cli_bad_arguments(args, needle):
    r = subprocess.run([sys.executable, "-m", "perflab", "busbw", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


@pytest.mark.slow
def test_cli_measures_on_cpu():
    r = subprocess.run([sys.executable, "-m", "perflab", "busbw", "--op", "all_reduce", "--nproc", "2", "--backend", "gloo",
                        "--sizes", "4K", "256K", "--budget-s", "0.05", "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(r.stdout)
    assert d["ok"] and [row["bytes"] for row in d["rows"]] == [4096, 262144]
    for row in d["rows"]:
        assert row["correct"] and row["seconds"] > 0
        assert row["algbw_gbps"] == pytest.approx(row["bytes"] / row["seconds"] / 1e9)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 1.0)  # 2(n-1)/n = 1 for n = 2


@pytest.mark.slow
def test_sweep_records_and_resumes():
    first = B.measure_sweep("all_gather", 2, ["8K", "64K"], backend="gloo", name="test_busbw_resume", budget_s=0.05,
                            progress=False)
    assert first.launch is not None and first.launch.ok
    assert [r["status"] for r in first.rows] == ["ok", "ok"]
    assert all(r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 0.5) for r in first.rows)
    again = B.measure_sweep("all_gather", 2, ["8K", "64K"], backend="gloo", name="test_busbw_resume", progress=False)
    assert again.launch is None and again.sweep.skipped == 2  # nothing launched: every point was recorded
    assert [r["seconds"] for r in again.rows] == [r["seconds"] for r in first.rows]
    fig = B.plot(again.rows, title="t")
    assert "bytes" in fig.axes[0].get_xlabel() and "GB/s" in fig.axes[0].get_ylabel()


# ----------------------------------------------------------------------------- busbw's collectives
@pytest.mark.parametrize("op", [op for op in B.OPS if op != "send_recv"])
def test_every_busbw_collective_checks_out_on_one_rank(one_rank, op):
    run, check = B.make_op(op, 64, 1, 0, CPU)
    assert check() is True
    run()  # the timed call, on the buffers check() left zeroed


def test_send_recv_passes_each_rank_its_left_neighbours_buffer(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    store = str(tmp_path / "store")
    peer = mp.get_context("fork").Process(target=_send_recv_peer, args=(store,))
    peer.start()
    try:
        dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=0, world_size=2,  # pyright: ignore[reportPrivateImportUsage]  # public, documented; absent from __all__
                                timeout=datetime.timedelta(seconds=30))
        run, check = B.make_op("send_recv", 64, 2, 0, CPU)
        assert check() is True  # rank 0 got rank 1's buffer (all 2.0)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        peer.join(30)
    assert peer.exitcode == 0


# ----------------------------------------------------------------------------- busbw
def test_busbw_names_sizes_and_errors():
    assert B.normalize_op("allreduce") == "all_reduce"
    assert B.normalize_op("ReduceScatter") == "reduce_scatter"
    with pytest.raises(InputError, match="whole number"):
        B.bus_factor("all_reduce", 2.5)
    with pytest.raises(InputError, match="whole number"):
        B.bus_factor("all_reduce", True)
    assert B.parse_size(4096) == 4096
    assert B.parse_size("64K") == 65536
    with pytest.raises(InputError, match="write bytes like"):
        B.parse_size("64Q")
    with pytest.raises(InputError, match="not a whole number of bytes"):
        B.parse_size("0.3K")
    with pytest.raises(InputError, match="larger than the limit"):
        B.check_size("all_reduce", 2**35, 2)
    assert B.size_label(512) == "512 B"
    assert B.size_label(3 * 2**20) == "3 MiB"


def test_busbw_run_frame_and_report():
    rows = [{"bytes": 1024, "status": "ok", "algbw_gbps": 1.0, "busbw_gbps": 1.0},
            {"bytes": 4096, "status": "error", "reason": "rank 1 raised ValueError: boom"}]
    run = B.BusbwRun("all_reduce", 2, "gloo", rows)
    assert list(run.frame["bytes"]) == [1024, 4096]
    assert not run.ok
    assert run.report() == "4096 B: error (rank 1 raised ValueError: boom)"
    launch = LaunchResult("perflab.distributed.workers.busbw", 2, 1, BackendChoice("gloo", "cpu", "test"), [], 1.0, 60.0,
                          False, [1], ranks=[RankOutcome(0, "ok"), RankOutcome(1, "raised", error="ValueError: boom")])
    both = B.BusbwRun("all_reduce", 2, "gloo", rows, launch=launch).report()
    assert both.splitlines()[0] == "4096 B: error (rank 1 raised ValueError: boom)"
    assert "rank 1 raised ValueError: boom" in both.splitlines()[1]
    assert B.BusbwRun("all_reduce", 2, "gloo", rows[:1]).report() == "every size measured"


def test_busbw_plot_on_given_axes_with_a_link_line():
    fig, ax = plt.subplots()
    rows = [{"bytes": 2**k, "status": "ok", "algbw_gbps": k / 10, "busbw_gbps": k / 5} for k in (10, 12, 14)]
    rows.append({"bytes": 2**16, "status": "error"})
    got = B.plot(rows, title="all_reduce on 2 ranks", link_gbps=25.0, link_label="PCIe 4 x16", ax=ax)
    assert got is fig
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["algbw = S / t", "busbw = algbw × factor", "PCIe 4 x16: 25 GB/s"]
    assert len(ax.get_lines()[0].get_xdata()) == 3  # the failed size is left out
    assert "GB/s" in ax.get_ylabel() and "bytes" in ax.get_xlabel()


def test_busbw_op_and_size_spellings_at_the_edges():
    assert B.normalize_op("Scat-ter") == "scatter"  # no alias needed: the name without separators
    for bad in ("K", "1kk"):
        with pytest.raises(InputError, match="write bytes like 4096, 64K, 1M or 1G"):
            B.parse_size(bad)


def test_busbw_measure_reports_a_job_that_measured_nothing(monkeypatch):
    import perflab.distributed.torchrun as T

    monkeypatch.setattr(T, "launch", _fake_busbw_launch(["{half a row"], ok=False))
    with pytest.raises(T.DistRunError, match="rank 1 raised RuntimeError: Connection closed by peer"):
        B.measure("all_reduce", 2, ["1K"], backend="gloo")


def test_busbw_sweep_records_wrong_and_missing_sizes(monkeypatch):
    import perflab.distributed.torchrun as T

    wrong = json.dumps({"bytes": 1024, "correct": False, "algbw_gbps": 1.0, "busbw_gbps": 1.0, "seconds": 1e-6})
    monkeypatch.setattr(T, "launch", _fake_busbw_launch([wrong, "not json"], ok=False))
    run = B.measure_sweep("all_reduce", 2, ["1K", "4K"], backend="gloo", name="test_cov_busbw_bad", progress=False)
    by_size = {r["bytes"]: r for r in run.rows}
    assert by_size[1024]["status"] != "ok"
    assert "all_reduce of 1024 B gave a wrong result on some rank" in by_size[1024]["reason"]
    assert "not measured: rank 1 raised RuntimeError: Connection closed by peer" in by_size[4096]["reason"]
    assert not run.ok


def test_a_sweep_reads_for_a_person_and_names_its_best_size():
    from perflab.distributed.busbw import BusbwRun

    rows = [{"bytes": 4096, "status": "ok", "seconds": 2.2e-4, "algbw_gbps": 0.0185, "busbw_gbps": 0.0185},
            {"bytes": 1 << 20, "status": "ok", "seconds": 8.95e-4, "algbw_gbps": 1.17, "busbw_gbps": 1.17},
            {"bytes": 1 << 26, "status": "error", "reason": "not measured: the job timed out"}]
    run = BusbwRun("all_reduce", 2, "gloo", rows)
    assert run.best is rows[1] and run.best_busbw_gbps == 1.17
    assert run.best_text() == {"all_reduce, 2 ranks, gloo, best": "1.17 GB/s"}
    t = run.table()
    assert list(t.index) == ["4 KiB", "1 MiB", "64 MiB"] and t.loc["1 MiB", "time per call"] == "895 µs"
    assert t.loc["64 MiB", "status"] == "error: not measured: the job timed out" and t.loc["64 MiB", "busbw (GB/s)"] == "–"
    assert BusbwRun("all_reduce", 2, "gloo", rows[2:]).best_text() is None
