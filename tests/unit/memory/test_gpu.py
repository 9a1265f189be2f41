"""Tests of `perflab.memory.gpu`."""

from __future__ import annotations

import re

import pytest
import torch

from perflab.core.errors import UnsupportedError
from perflab.memory import gpu
from perflab.workload.models import preset


def test_measuring_child_returns_its_last_json_line_and_drops_unset_variables(monkeypatch):
    monkeypatch.setenv("PERFLAB_TEST_DROP", "1")
    out = gpu._run_child("import os, json\nprint('noise')\nprint(json.dumps({'v': os.environ.get('PERFLAB_TEST_DROP')}))",
                         env={"PERFLAB_TEST_DROP": None}, timeout=60)
    assert out == {"v": None}


def test_measuring_child_failures_carry_its_output():
    with pytest.raises(gpu.ChildError, match=r"(?s)failed \(exit 1\): .*ZeroDivisionError"):
        gpu._run_child("1 / 0", timeout=60)
    with pytest.raises(gpu.ChildError, match=re.escape("did not finish in 1 s; its output: 'started\\n'")):
        gpu._run_child("import time\nprint('started', flush=True)\ntime.sleep(30)", timeout=1)


def test_gpu_experiments_skip_with_a_reason_on_cpu():
    from perflab.memory import gpu as gpumem

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    reason = gpumem.gpu_skip_reason()
    assert reason and "\n" not in reason
    with pytest.raises(UnsupportedError):
        gpumem.kernel_preload()
    with pytest.raises(UnsupportedError):
        gpumem.fragmentation(True)


@pytest.mark.gpu
def test_kernel_preload_lazy_vs_eager():
    from perflab.memory import gpu as gpumem

    lazy, eager = gpumem.kernel_preload()
    assert lazy["mode"] == "LAZY" and eager["mode"] == "EAGER"
    assert eager["rise_after_tensor_bytes"] > lazy["rise_after_tensor_bytes"] > 0


@pytest.mark.gpu
def test_distributed_memory_after_first_barrier():
    from perflab.memory import gpu as gpumem

    rows = gpumem.distributed_init_memory()
    stages = {r["stage"]: r for r in rows}
    assert stages["after first barrier"]["used_bytes"] >= stages["after init_process_group"]["used_bytes"]


@pytest.mark.gpu
def test_fragmentation_and_expandable_segments():
    from perflab.memory import gpu as gpumem

    plain = gpumem.fragmentation(False)
    exp = gpumem.fragmentation(True)
    assert plain.reserved_over_allocated > exp.reserved_over_allocated and exp.expandable_segments


@pytest.mark.gpu
def test_memory_snapshot(tmp_path):
    from perflab.memory import gpu as gpumem

    out = gpumem.step_snapshot(preset("tiny-gpt"), batch=2, path=tmp_path / "snap.pickle")
    assert (tmp_path / "snap.pickle").stat().st_size > 0
    assert out.segments > 0 and out.largest_at_peak and not out.largest().empty


def test_the_gpu_experiments_read_as_a_person_reads_them():
    """The GPU-only cells' tables, from rows as the experiments return them (figures like an H200's)."""
    MiB = 2**20
    pre = [{"mode": "LAZY", "torch": "2.11.0+cu130", "rise_after_tensor_bytes": 536 * MiB,
            "rise_after_work_bytes": 600 * MiB, "torch_reserved_bytes": 2 * MiB, "context_and_kernels_bytes": 534 * MiB},
           {"mode": "EAGER", "torch": "2.11.0+cu130", "rise_after_tensor_bytes": 1200 * MiB,
            "rise_after_work_bytes": 1210 * MiB, "torch_reserved_bytes": 2 * MiB, "context_and_kernels_bytes": None}]
    t = gpu.preload_table(pre)
    assert list(t["CUDA_MODULE_LOADING"]) == ["LAZY", "EAGER"]
    assert t["used after a 4-byte tensor"].iloc[1] == "1.17 GiB (1.26 GB)" and t["context and kernels"].iloc[1] == "–"
    rows = [{"stage": "after CUDA init", "used_bytes": 600 * MiB, "nvml_used_bytes": 610 * MiB, "rise_bytes": 0,
             "device_id": False},
            {"stage": "after first barrier", "used_bytes": 2600 * MiB, "nvml_used_bytes": None, "rise_bytes": 2000 * MiB,
             "device_id": True}]
    d = gpu.distributed_table(rows)
    assert list(d["device_id at init"]) == ["no", "yes"] and d["rise since CUDA init"].iloc[1] == "1.95 GiB (2.1 GB)"
    assert d["NVML used"].iloc[1] == "–"
    frag = [gpu.Fragmentation(False, 100 * MiB, 4000 * MiB, 1 * MiB, 3900 * MiB, 48, 0, 0, 40.0, 3899 * MiB),
            gpu.Fragmentation(True, 100 * MiB, 180 * MiB, 1 * MiB, 180 * MiB, 1, 0, 0, 1.8, 179 * MiB)]
    f = gpu.fragmentation_table(frag)
    assert list(f["expandable segments"]) == ["no", "yes"] and list(f["reserved ÷ allocated"]) == ["40.0×", "1.80×"]
    snap = gpu.Snapshot("snap.pickle", 3, 300 * MiB, 1000, 250 * MiB, [{"bytes": 64 * MiB, "where": "models.py:120 forward"}])
    assert snap.text() == "saved snap.pickle: 3 segments, 300 MiB reserved, peak traced 250 MiB"
    assert snap.largest().to_dict("records") == [{"size": "64 MiB", "bytes": "67,108,864", "where": "models.py:120 forward"}]
