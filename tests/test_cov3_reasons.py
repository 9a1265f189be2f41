"""Branches that only looked like they needed a GPU, a noisy machine or a hung node: the report's
noisy-copy note, its wave model for a device with SMs, its failing sweeps and searches, its full-size
MAMF ranges and stored ceiling; the grader's resource limits switched off or refused; the collective
counter on a list of tensors; and the two-node launch's decoding and stopping of its nodes. Each is
driven in this process with a fake measurement, a fake limit or a fake node command (no GPU, no
root, no network namespaces, no torchrun)."""

from __future__ import annotations

import datetime
import math
import os
import resource
import signal
import subprocess
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from perflab.core.device import DeviceInfo, describe
from perflab.core.readout import NOISY_SPREAD
from perflab.course import gradebook
from perflab.course import report as R

CPU = torch.device("cpu")


def _ctx(quick: bool, info=None) -> R.Ctx:
    return R.Ctx(CPU, info if info is not None else DeviceInfo("cpu", "test cpu"), quick)


# ----------------------------------------------------------------------------- report: memory
def test_a_copy_whose_spread_passes_the_noise_threshold_gets_a_noisy_note(monkeypatch):
    from perflab.core import measure as M

    sizes = []

    def copy(nbytes, device, *, rep_ms, warmup_ms):
        sizes.append(nbytes // 2**20)
        median = 1e-3 * nbytes / 2**20
        spread = 0.5 if nbytes == 8 * 2**20 else NOISY_SPREAD / 2  # only the 8 MiB copy is noisy
        return M.BandwidthResult("device copy", nbytes, 2 * nbytes, median, 2 * nbytes / median / 1e9, None, None,
                                 "cpu", 10, iqr_s=spread * median)

    monkeypatch.setattr(M, "measure_copy_bandwidth", copy)
    out = R.part_memory(_ctx(quick=True))
    assert sizes == [1, 8, 64]
    noisy, h2d = out["notes"]
    assert noisy.startswith("8 MiB copy: noisy: the middle half of the timing samples spans 50")
    assert noisy.endswith("measure again before trusting it")
    assert h2d.startswith("host→device: not measured (no CUDA GPU")
    assert [r["spread"] for r in out["data"]["copy"]] == pytest.approx([0.05, 0.5, 0.05])
    assert out["figures"][0]["label"] == "device copy GB/s (64 MiB)"


def test_a_matmul_whose_spread_passes_the_noise_threshold_gets_a_noisy_note(monkeypatch):
    """Whether a real timing is noisy depends on the machine's load at that moment, so the note's
    line is run here with a made-up spread rather than left to chance."""
    from perflab.core import measure as M

    def matmul(m, n, k, dtype, device, *, rep_ms, warmup_ms):
        spread = 0.5 if dtype == "fp32" else NOISY_SPREAD / 2
        return SimpleNamespace(tflops=0.1, median_s=2e-3, spread=spread, peak_tflops=None, peak_fraction=None,
                               rel_error=1e-6)

    monkeypatch.setattr(M, "measure_matmul", matmul)
    out = R.part_matmul(_ctx(quick=True))
    noisy = [n for n in out["notes"] if n.startswith("fp32: noisy: ")]
    assert len(noisy) == 1 and "measure again before trusting it" in noisy[0]
    assert all(not n.startswith(("bf16", "fp16")) for n in out["notes"])  # their spreads are under the threshold
    assert [r["spread"] for r in out["data"]["rows"] if r["dtype"] == "fp32"] == [0.5]


def test_timings_are_written_in_seconds_milliseconds_or_microseconds():
    from perflab.core.timing import _fmt_s

    assert [_fmt_s(2.5), _fmt_s(0.0125), _fmt_s(3.2e-5)] == ["2.500 s", "12.500 ms", "32.0 µs"]
    assert [_fmt_s(1.0), _fmt_s(1e-3)] == ["1.000 s", "1.000 ms"]  # each unit from its first whole one


# ----------------------------------------------------------------------------- report: waves
def _fake_sweep(monkeypatch, seen, time_of=None):
    from perflab.gemm import shapes

    def sweep(dim, values, fixed, dtype, device, **kw):
        seen.append((dim, list(values), dict(fixed), dtype))
        rows = []
        for n in values:
            if time_of is None:
                rows.append({"params": {"n": n}, "status": "failed", "reason": "RuntimeError: no kernel"})
                continue
            t = time_of(n, fixed)
            rows.append({"params": {"n": n}, "status": "ok", "median_s": t,
                         "tflops": 2 * fixed["m"] * n * fixed["k"] / t / 1e12})
        return SimpleNamespace(rows=rows, failed=sum(r["status"] != "ok" for r in rows))

    monkeypatch.setattr(shapes, "sweep_dimension", sweep)


def test_the_wave_part_fails_when_no_point_of_the_sweep_is_measured(monkeypatch):
    seen = []
    _fake_sweep(monkeypatch, seen)
    with pytest.raises(RuntimeError, match="^no point of the wave sweep could be measured$"):
        R.part_waves(_ctx(quick=True))
    assert seen == [("n", list(range(64, 513, 64)), {"m": 256, "k": 256}, "fp32")]


def test_the_wave_model_and_fit_run_for_a_device_with_sms(monkeypatch):
    from perflab.gemm import shapes

    # a 4-SM GPU with 256x128 tiles: m = 512 is 2 rows of tiles, n adds a column every 128, so
    # n = 32..1024 needs 1 wave up to 256, 2 up to 512, 3 up to 768, 4 up to 1024
    def waves(n, fixed):
        return math.ceil(2 * math.ceil(n / 128) / 4)

    seen = []
    _fake_sweep(monkeypatch, seen, lambda n, fixed: 1e-3 * waves(n, fixed) + 2e-4)
    gpu = DeviceInfo("cuda", "test gpu", details={"sm_count": 4})
    out = R.part_waves(_ctx(quick=False, info=gpu))
    assert seen == [("n", list(range(32, 1025, 32)), {"m": 512, "k": 512}, "fp32")]
    model = out["data"]["model"]
    assert model["sms"] == 4 and model["sms_source"] == "test gpu (reported by the driver)"
    assert model["cliffs"] == [288, 544, 800]  # the first n of each new wave
    assert model["predicted_tflops"] == []  # no peak is known for this GPU
    # times that follow a staircase exactly: the best tile's fitted staircase gives them back
    fit = out["data"]["fit"]
    assert fit["rel_rms"] < 1e-9 and fit["steps"] == 3
    ns = [r["n"] for r in out["data"]["rows"]]
    assert shapes.fitted_staircase(fit, ns, "n", {"m": 512, "k": 512}, 4) == pytest.approx(
        [r["median_s"] for r in out["data"]["rows"]])
    assert out["notes"] == []
    worst = next(f for f in out["figures"] if f["key"] == "waves.fp32.worst_over_best")
    assert worst["better"] is None and 0 < worst["value"] < 1

    # a GPU of the table: its peak gives the model's predicted TFLOP/s, one per n, none above the peak
    h100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", details={"sm_count": 132})
    model = R.part_waves(_ctx(quick=True, info=h100))["data"]["model"]
    assert model["cliffs"] == [] and len(model["predicted_tflops"]) == 8  # 256×n×256 is one wave on 132 SMs
    assert all(0 < t <= 66.9 for t in model["predicted_tflops"])
    assert shapes.sm_count_of(h100) == (132, "NVIDIA H100 80GB HBM3 (reported by the driver)")


# ----------------------------------------------------------------------------- report: mamf
def _landscape(p):
    """A smooth made-up TFLOP/s landscape with one top at m = n = 1024, k = 1536."""
    t = 1.0 - ((p["m"] - 1024) ** 2 + (p["n"] - 1024) ** 2 + (p["k"] - 1536) ** 2) / 2**24
    return {"mean_tflops": t, "median_tflops": t, "max_tflops": t * 1.01}


def test_the_mamf_part_fails_when_no_shape_can_be_measured(monkeypatch, tmp_path):
    from perflab.gemm import mamf

    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    real = mamf.search

    def broken(p):
        raise RuntimeError("no kernel for this shape")

    monkeypatch.setattr(mamf, "search", lambda *a, **kw: real(*a, measure=broken, **kw))
    with pytest.raises(RuntimeError, match=r"^no shape could be measured \(8 tried\)$"):
        R.part_mamf(_ctx(quick=True, info=describe(CPU)))


def test_the_full_mamf_part_searches_the_default_ranges_and_shows_the_stored_ceiling(monkeypatch, tmp_path):
    from perflab.gemm import mamf

    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    real = mamf.search
    calls = []

    def search(m, n, k, **kw):  # the real search, on a made-up landscape instead of timed matmuls
        calls.append(kw)
        assert m == n == k == list(range(256, 2049, 256))  # a CPU's full default ranges, every size
        return real(m, n, k, measure=_landscape, **kw)

    monkeypatch.setattr(mamf, "search", search)
    info = describe(CPU)
    assert mamf.measured_ceiling(info, "fp32") is None
    out = R.part_mamf(_ctx(quick=False, info=info))
    (kw,) = calls
    assert kw["save_ceiling"] is True and kw["name"] == "report_mamf_fp32"
    assert (kw["rep_ms"], kw["warmup_ms"]) == (60, 20)
    data = out["data"]
    assert {ax: data["best"][ax] for ax in "mnk"} == {"m": 1024, "n": 1024, "k": 1536}
    assert data["ranges"] == {ax: [256, 2048, 8] for ax in "mnk"} and data["grid_points"] == 512
    # the full search saved its ceiling for this device, and the report shows it as a figure
    assert data["stored_ceiling"] == pytest.approx(1.0) == mamf.measured_ceiling(info, "fp32")
    stored = next(f for f in out["figures"] if f["key"] == "mamf.fp32.stored")
    assert stored["label"] == "measured ceiling fp32 (perflab mamf, stored)" and stored["value"] == pytest.approx(1.0)
    assert out["notes"] == []
    assert out["summary"].startswith("MAMF fp32 1 TFLOP/s at 1024×1024×1536")


# ----------------------------------------------------------------------------- gradebook: limits
def _fake_limits(monkeypatch, refuse=()):
    """resource.getrlimit/setrlimit on a table of this test's own: the test process keeps its limits."""
    table = {resource.RLIMIT_AS: (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
             resource.RLIMIT_DATA: (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
             resource.RLIMIT_CPU: (resource.RLIM_INFINITY, 500),
             resource.RLIMIT_FSIZE: (resource.RLIM_INFINITY, resource.RLIM_INFINITY)}
    set_calls = []

    def setrlimit(which, limits):
        if which in refuse:
            raise ValueError("current limit exceeds maximum limit")
        set_calls.append((which, limits))
        table[which] = limits

    monkeypatch.setattr(resource, "getrlimit", lambda which: table[which])
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    monkeypatch.setattr(gradebook, "_has_nvidia_gpu", lambda: False)
    return set_calls


def test_a_limit_switched_off_is_left_as_it_is(monkeypatch):
    set_calls = _fake_limits(monkeypatch)
    gradebook.Limits(memory_bytes=None, cpu_s=None, file_bytes=None).apply(cpu_s=120)
    assert set_calls == [(resource.RLIMIT_CPU, (120, 120))]  # only the CPU time, from the timeout
    set_calls.clear()
    gradebook.Limits(memory_bytes=None, cpu_s=900, file_bytes=None).apply(cpu_s=120)
    assert set_calls == [(resource.RLIMIT_CPU, (120, 120))]  # the hard limit (120 now) is never raised


def test_a_limit_the_system_refuses_is_reported_and_the_others_still_apply(monkeypatch, capsys):
    set_calls = _fake_limits(monkeypatch, refuse=(resource.RLIMIT_AS,))
    gradebook.Limits(memory_bytes=2**30, cpu_s=None, file_bytes=2**20).apply(cpu_s=60)
    assert capsys.readouterr().out == ("perflab grade: this system does not take that limit "
                                       "(current limit exceeds maximum limit); running without it\n")
    assert set_calls == [(resource.RLIMIT_CPU, (60, 60)), (resource.RLIMIT_FSIZE, (2**20, 2**20))]


# ----------------------------------------------------------------------------- shard: the collective counter
@pytest.fixture
def one_rank_group(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1,  # pyright: ignore[reportPrivateImportUsage]  # public, documented; absent from __all__
                            timeout=datetime.timedelta(seconds=30))
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_the_collective_counter_adds_up_every_tensor_of_a_list(one_rank_group):
    from perflab.shard.worker import functional_collective_counter

    # the ops DTensor calls (the first call under any dispatch mode imports torch._dynamo: seconds, once)
    ops = torch.ops._c10d_functional
    group = one_rank_group.group_name
    a, b = torch.ones(3), torch.full((2, 4), 2.0)
    counter = functional_collective_counter()
    with counter:
        out = [ops.wait_tensor(t) for t in ops.all_reduce_coalesced([a, b], "sum", group)]
        one = ops.wait_tensor(ops.all_reduce(a, "sum", group))
    assert counter.counts == {"all_reduce_coalesced": {"calls": 1, "bytes": (3 + 8) * 4},
                              "all_reduce": {"calls": 1, "bytes": 3 * 4}}
    assert torch.equal(out[0], a) and torch.equal(out[1], b) and torch.equal(one, a)  # one rank: the sum is itself


# ----------------------------------------------------------------------------- shard: the two-node launch
def _fake_nodes(monkeypatch, commands):
    """two_node_launch with its namespaces faked: node i runs commands[i], with no `ip` and no root."""
    from perflab.shard import netns

    deleted = []
    monkeypatch.setattr(netns, "unavailable", lambda: None)
    monkeypatch.setattr(netns, "create", lambda tag: ([f"perflab-{tag}-0", f"perflab-{tag}-1"], ["lo", "lo"]))
    monkeypatch.setattr(netns, "delete", deleted.append)
    monkeypatch.setattr(netns, "node_command", lambda ns, node, nproc, rdzv_id, agent=None: commands[node])
    return netns, deleted


def _record(rank: int) -> str:
    import json

    rec = {"RANK": rank, "LOCAL_RANK": rank % 2, "GROUP_RANK": rank // 2, "WORLD_SIZE": 4, "all_reduce": 6.0}
    return "PERFLAB_RESULT " + json.dumps({"rank": rank, "result": rec})


def test_a_result_record_cut_by_another_ranks_output_is_not_counted(monkeypatch):
    cut = _record(0)[:40]  # rank 0's record, cut mid-way by rank 1's on the same line
    node0 = f"[rank0] starting\n{cut}{_record(1)}\nPERFLAB_RESULT [1, 2]\n"
    node1 = f"{_record(2)}\n{_record(3)} and more output\nPERFLAB_RESULT {{\"rank\": 3}}\n"
    netns, deleted = _fake_nodes(monkeypatch, [["printf", "%s", node0], ["printf", "%s", node1]])
    res = netns.two_node_launch(nproc_per_node=2, timeout=30)
    assert [r["RANK"] for r in res["ranks"]] == [1, 2, 3]
    assert [r["namespace_node"] for r in res["ranks"]] == [0, 1, 1]
    assert res["returncodes"] == [0, 0] and not res["timed_out"]
    assert res["ok"] is False  # 3 whole records of the 4 ranks
    assert res["outputs"] == [node0, node1] and len(deleted) == 1 and len(deleted[0]) == 2


class _ShortGrace(subprocess.Popen):
    """Popen whose waits last at most 0.2 s: the launch's 2 s grace after SIGTERM, shortened. A node
    started through `sh` ignores SIGTERM from before its first instruction (set in the child before
    the exec, so a signal sent at once cannot find it still unprotected), as a hung rank might."""

    def __init__(self, args, *a, **kw):
        if args and args[0] == "sh":
            kw["preexec_fn"] = lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)
        super().__init__(args, *a, **kw)

    def wait(self, timeout=None):
        return super().wait(timeout=None if timeout is None else min(timeout, 0.2))


def test_nodes_past_the_timeout_are_stopped_and_one_that_ignores_sigterm_is_killed(monkeypatch):
    netns, deleted = _fake_nodes(monkeypatch, [["sleep", "30"], ["sh", "-c", "sleep 30"]])
    monkeypatch.setattr(subprocess, "Popen", _ShortGrace)
    res = netns.two_node_launch(nproc_per_node=2, timeout=0.05)
    assert res["timed_out"] and not res["ok"] and res["ranks"] == []
    assert res["returncodes"] == [-signal.SIGTERM, -signal.SIGKILL]
    assert len(deleted) == 1


def test_a_node_whose_process_group_is_gone_when_signalled_does_not_stop_the_launch(monkeypatch):
    netns, deleted = _fake_nodes(monkeypatch, [["sleep", "30"], ["sh", "-c", "sleep 30"]])
    monkeypatch.setattr(subprocess, "Popen", _ShortGrace)
    real_killpg = os.killpg
    sent = []

    def killpg(pgid, sig):  # the signal lands, then the group is reported gone (it exited meanwhile)
        sent.append(sig)
        real_killpg(pgid, sig)
        raise ProcessLookupError(3, "No such process")

    monkeypatch.setattr(os, "killpg", killpg)
    res = netns.two_node_launch(nproc_per_node=2, timeout=0.05)
    assert sent == [signal.SIGTERM, signal.SIGTERM, signal.SIGKILL]
    assert res["timed_out"] and res["returncodes"] == [-signal.SIGTERM, -signal.SIGKILL] and len(deleted) == 1
