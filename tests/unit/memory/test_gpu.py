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
