"""perflab.distributed on the launcher's side, in this process: bad input, the lessons' tables and figures,
and the lab 06 verdicts for every way a learner's ring can go wrong (the job's result is built here,
no rank is started)."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402  (the learner's functions below use torch, as in the notebook)

from perflab.core import grading  # noqa: E402
from perflab.core.errors import InputError  # noqa: E402
from perflab.core.grading import LabCheckError  # noqa: E402
from perflab.distributed import busbw as B  # noqa: E402
from perflab.distributed import collectives as C  # noqa: E402
from perflab.distributed import ddp as D  # noqa: E402
from perflab.distributed import lab06 as lab  # noqa: E402
from perflab.distributed import overlap as O  # noqa: E402
from perflab.distributed.torchrun import BackendChoice, LaunchResult, RankOutcome  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


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


# ----------------------------------------------------------------------------- collectives
def test_collectives_unknown_primitive_names_the_known_ones():
    for fn in (C.rank_input, C.expected):
        with pytest.raises(KeyError, match="one of broadcast, reduce"):
            fn("allreduce", 0, 2, 2)
    for fn in (C._native, C._equivalent):
        with pytest.raises(KeyError):
            fn("allreduce", torch.zeros(2), 0, 2, 2, 0)


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


# ----------------------------------------------------------------------------- ddp
def test_accumulation_table_counts_from_the_second_step():
    v = {"all_reduce_calls_per_step": [9, 4, 4], "bytes_per_step": [2e6, 2e6, 2e6], "step_s": [0.03, 0.01, 0.02]}
    one = {"all_reduce_calls_per_step": [1], "bytes_per_step": [5e5], "step_s": [0.004]}
    df = D.accumulation_table([{"grad_accumulation": {"sync every micro-batch": v, "no_sync": one, "LocalSGD": one}}])
    assert df.loc["sync every micro-batch", "all-reduce calls per step"] == 4
    assert df.loc["sync every micro-batch", "median step (ms)"] == pytest.approx(20.0)
    assert df.loc["no_sync", "all-reduce calls per step"] == 1
    assert df.loc["no_sync", "MB all-reduced per step"] == pytest.approx(0.5)


def test_memory_table_adds_gpu_columns_when_measured():
    cpu = {"init_memory": {"stages": [{"stage": "before", "rss_bytes": 2**21}, {"stage": "after", "rss_bytes": None}]}}
    gpu = {"init_memory": {"stages": [{"stage": "after", "rss_bytes": 2**20, "gpu_used_bytes": 3 * 2**20,
                                       "torch_reserved_bytes": 2**20}]}}
    df = D.memory_table([cpu, gpu])
    assert list(df["host RSS (MiB)"])[:1] == [2.0]
    assert df["host RSS (MiB)"].isna().tolist() == [False, True, False]
    assert df.loc[2, "GPU in use (MiB)"] == 3.0 and df.loc[2, "torch reserved (MiB)"] == 1.0


def test_ddp_helpers_refuse_what_cannot_work():
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(RuntimeError, match="unused parameter"):
        D._grad(p)
    with pytest.raises(KeyError):
        D._hook("int4", {})
    with pytest.raises(RuntimeError, match="no process group is initialised"):
        D.bf16_compress_equivalent(None, None)


# ----------------------------------------------------------------------------- overlap
def test_overlap_hardware_from_numbers_and_its_errors():
    hw = O.hardware(None, None, peak_tflops=100, link_gbps=50)
    assert (hw.peak_flops, hw.bw_bytes_per_s) == (100e12, 50e9)
    assert hw.label == "100 TFLOP/s, 50 GB/s"
    with pytest.raises(InputError, match="give an accelerator id"):
        O.hardware(None, "nvlink4-h100")
    with pytest.raises(InputError, match="no dense bf16 peak"):
        O.hardware("v100-sxm2-16gb", "nvlink4-h100")
    with pytest.raises(InputError, match="give a link id"):
        O.hardware("h100-sxm", None)
    with pytest.raises(InputError, match="link_gbps must be a positive number"):
        O.hardware("h100-sxm", None, link_gbps=-1)


def test_overlap_plot_on_given_axes():
    hw = O.hardware("h100-sxm", "nvlink4-h100")
    res = O.all_four(8192, 80, 4096, 1, 8, 8, 10, hw)
    fig, ax = plt.subplots()
    assert O.plot(res, title="t", ax=ax) is fig
    assert len(ax.patches) == 2 * len(res)


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


def test_busbw_op_and_size_spellings_at_the_edges():
    assert B.normalize_op("Scat-ter") == "scatter"  # no alias needed: the name without separators
    for bad in ("K", "1kk"):
        with pytest.raises(InputError, match="write bytes like 4096, 64K, 1M or 1G"):
            B.parse_size(bad)


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
