"""Tests of `perflab.core.device`."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from perflab.core import (
    device,
)
from perflab.core.device import DeviceInfo, describe
from perflab.core.errors import InputError
from perflab.course import report as R

from .helpers import _ctx

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: six
model\t\t: 85
model name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz
flags\t\t: avx2 fma
"""


MAX_FREQ = "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"


def _facts_with(monkeypatch, files: dict[str, str | None]):
    real = device._read
    monkeypatch.setattr(device, "_read", lambda path: files[path] if path in files else real(path))
    return device.cpu_facts.__wrapped__()  # uncached: the process's own cached facts stay untouched


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


CPUINFO_device = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu avx avx2 fma avx512f amx_bf16

processor\t: 1
vendor_id\t: GenuineIntel
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu avx avx2 fma avx512f amx_bf16
"""


def test_cpu_clock_comes_from_cpufreq_then_from_the_model_name(monkeypatch):
    f = _facts_with(monkeypatch, {"/proc/cpuinfo": CPUINFO, MAX_FREQ: "3700000"})
    assert (f.clock_mhz, f.clock_source) == (3700.0, "cpufreq max (boost) clock")
    assert f.cpu_model == 85 and f.family is None  # 'six' is not a number: unknown, not an error
    f = _facts_with(monkeypatch, {"/proc/cpuinfo": CPUINFO, MAX_FREQ: None})
    assert (f.clock_mhz, f.clock_source) == (2400.0, "nominal clock in the model name")
    assert f.model == "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz" and f.flags == frozenset({"avx2", "fma"})


def test_meminfo_is_empty_without_proc_and_without_psutil(monkeypatch):
    import psutil

    def broken():
        raise RuntimeError("no memory figures here")

    monkeypatch.setattr(device, "_read", lambda path: None)
    monkeypatch.setattr(psutil, "virtual_memory", broken)
    assert device._meminfo() == {}


def test_cpu_description_without_torchs_vector_isa(monkeypatch):
    def broken():
        raise RuntimeError("no capability query in this build")

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", broken)
    info = device._describe_cpu()
    assert info.kind == "cpu" and info.details["vector_isa"] is None
    assert info.details["torch_threads"] == torch.get_num_threads()


def test_mps_is_refused_here_and_chosen_where_torch_reports_it(monkeypatch):
    monkeypatch.delenv("PERFLAB_DEVICE", raising=False)
    monkeypatch.setattr(device, "_mps_available", lambda: False)
    with pytest.raises(InputError, match="^device 'mps' asked for, but MPS is not available: use cpu$"):
        device.pick_device("mps")
    monkeypatch.setattr(device, "_mps_available", lambda: True)  # an Apple GPU, as torch would report it
    assert device.pick_device("mps") == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device.pick_device() == torch.device("mps")


def test_synchronize_waits_for_an_apple_gpu_through_torch_mps(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.mps, "synchronize", lambda: calls.append("mps"))
    device.synchronize("mps")
    device.synchronize("cpu")  # a no-op
    assert calls == ["mps"]


def test_the_device_part_shows_a_spec_sheet_memory_bandwidth():
    import torch

    from perflab.core.device import DeviceInfo
    from perflab.course import report as R
    from perflab.course.report_types import Figure

    ctx = R.Ctx(torch.device("cpu"), DeviceInfo("cuda", "NVIDIA H100 80GB HBM3"), quick=True)
    out = R.part_device(ctx)
    (bw,) = [f for f in out.figures if f.key == "spec.memory_bandwidth"]
    assert bw == Figure("spec.memory_bandwidth", "memory bandwidth (spec sheet)", 3350.0, "GB/s", "higher")
    assert out.data["spec_id"] == "h100-sxm"


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
    model = out.data["model"]
    assert model["sms"] == 4 and model["sms_source"] == "test gpu (reported by the driver)"
    assert model["cliffs"] == [288, 544, 800]  # the first n of each new wave
    assert model["predicted_tflops"] == []  # no peak is known for this GPU
    # times that follow a staircase exactly: the best tile's fitted staircase gives them back
    fit = out.data["fit"]
    assert fit["rel_rms"] < 1e-9 and fit["steps"] == 3
    ns = [r["n"] for r in out.data["rows"]]
    assert shapes.fitted_staircase(fit, ns, "n", {"m": 512, "k": 512}, 4) == pytest.approx(
        [r["median_s"] for r in out.data["rows"]])
    assert out.notes == []
    worst = next(f for f in out.figures if f.key == "waves.fp32.worst_over_best")
    assert worst.better is None and worst.value is not None and 0 < worst.value < 1

    # a GPU of the table: its peak gives the model's predicted TFLOP/s, one per n, none above the peak
    h100 = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", details={"sm_count": 132})
    model = R.part_waves(_ctx(quick=True, info=h100)).data["model"]
    assert model["cliffs"] == [] and len(model["predicted_tflops"]) == 8  # 256×n×256 is one wave on 132 SMs
    assert all(0 < t <= 66.9 for t in model["predicted_tflops"])
    assert shapes.sm_count_of(h100) == (132, "NVIDIA H100 80GB HBM3 (reported by the driver)")


def test_device_info_rows_skip_missing_values_and_show_small_sizes():
    from perflab.core.device import DeviceInfo
    from perflab.core.readout import binary_bytes

    info = DeviceInfo("cuda", "test GPU", 1, {"l2_bytes": 4096, "driver": None, "links": []})
    assert info.torch_device == torch.device("cuda", 1)
    assert info.table() == [("device", "cuda:1"), ("name", "test GPU"), ("l2", "4 KiB")]
    assert binary_bytes(2048) == "2 KiB"


def test_memory_sizes_from_text_and_without_proc(monkeypatch):
    from perflab.core import device

    assert device._parse_size("") is None and device._parse_size("unknown") is None
    assert device._parse_size("512K") == 512 * 2**10
    monkeypatch.setattr(device, "_read", lambda path: None)  # no /proc (macOS): psutil's figures instead
    mem = device._meminfo()
    assert mem["MemTotal"] >= mem["MemAvailable"] > 0
    assert device.free_memory_bytes("mps") is None


def test_an_apple_gpu_is_described_without_asking_the_device():

    info = describe("mps")  # a description from torch and the OS only: it works on any machine
    assert info.kind == "mps" and info.name.startswith("Apple GPU (") and info.index is None


def test_parse_cpuinfo():
    cpus = device.parse_cpuinfo(CPUINFO_device)
    assert len(cpus) == 2
    assert cpus[0]["model name"].startswith("Intel(R) Xeon(R) Platinum 8480+")
    assert "amx_bf16" in cpus[1]["flags"].split()


def test_pick_device_cpu_here(monkeypatch):
    monkeypatch.delenv("PERFLAB_DEVICE", raising=False)
    dev = device.pick_device()
    if not torch.cuda.is_available():
        assert dev.type in {"cpu", "mps"}
    monkeypatch.setenv("PERFLAB_DEVICE", "cpu")
    assert device.pick_device().type == "cpu"


@pytest.mark.parametrize("bad", ["tpu", "cuda:99"])
def test_pick_device_bad_request(bad):
    if bad == "cuda:99" and not torch.cuda.is_available():
        bad = "cuda"
    with pytest.raises(InputError):
        device.pick_device(bad)


def test_describe_cpu():
    info = device.describe("cpu")
    d = info.as_dict()
    assert d["kind"] == "cpu" and d["name"]
    assert d["torch_threads"] == torch.get_num_threads()
    assert d["logical_cpus"] >= 1 and d["physical_cores"] >= 1
    assert d["numa_nodes"] or not __import__("pathlib").Path("/sys/devices/system/node/node0").exists()
    assert info.slug.startswith("cpu-") and " " not in info.slug
    text = str(info)
    assert "torch threads" in text and "GiB" in text


def test_free_memory_cpu():
    assert (device.free_memory_bytes("cpu") or 0) > 0


@pytest.mark.gpu
def test_describe_cuda():
    info = device.describe("cuda")
    d = info.as_dict()
    assert d["sm_count"] > 0 and d["memory_bytes"] > 0 and d["compute_capability"]
    assert d["cuda_version"] or d["hip_version"]
    assert d["driver_version"], "driver version should be readable via NVML or /proc"
