import pytest
import torch

from perflab.core import device
from perflab.core.errors import InputError

CPUINFO = """processor\t: 0
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


def test_parse_cpuinfo():
    cpus = device.parse_cpuinfo(CPUINFO)
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
    assert device.free_memory_bytes("cpu") > 0


@pytest.mark.gpu
def test_describe_cuda():
    info = device.describe("cuda")
    d = info.as_dict()
    assert d["sm_count"] > 0 and d["memory_bytes"] > 0 and d["compute_capability"]
    assert d["cuda_version"] or d["hip_version"]
    assert d["driver_version"], "driver version should be readable via NVML or /proc"
