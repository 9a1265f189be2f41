"""Tests of `perflab.compiler.sizes`: lesson 10's sizes by kind of run."""

from __future__ import annotations

import pytest
import torch

from perflab.compiler.sizes import BACKENDS, SIZES
from perflab.core.sizes import for_run
from perflab.workload.models import preset


def test_each_kind_of_run_has_its_sizes_and_the_gpu_the_largest():
    assert set(SIZES) == {"smoke", "cpu", "gpu"}
    smoke, cpu, gpu = SIZES["smoke"], SIZES["cpu"], SIZES["gpu"]
    assert for_run(SIZES, True, "cuda") is smoke and for_run(SIZES, False, "cpu") is cpu
    assert for_run(SIZES, False, torch.device("cuda", 0)) is gpu
    assert smoke.seq < cpu.seq < gpu.seq and smoke.steps < cpu.steps < gpu.steps
    for s in SIZES.values():
        assert s.speed_backend in BACKENDS and s.deep_backend in BACKENDS
        assert s.seq <= preset(s.model).seq_len and s.ck_seq <= preset(s.model).seq_len


@pytest.mark.parametrize("kind, inductor, backend", [
    ("smoke", None, "eager"), ("smoke", True, "eager"),  # smoke mode never compiles kernels
    ("cpu", None, "eager"), ("cpu", True, "inductor"), ("gpu", None, "inductor"), ("gpu", False, "eager"),
])
def test_sections_3_and_4_compile_kernels_where_the_size_or_the_learner_says(kind, inductor, backend):
    assert SIZES[kind].backend(inductor) == backend


def test_smoke_mode_traces_one_block_and_leaves_the_inductors_kernel_out():
    smoke = SIZES["smoke"]
    assert dict(smoke.recompile_dims)["layers"] == 1 and smoke.ck_layers == 1 and not smoke.inductor_code
    assert SIZES["cpu"].recompile_dims == () and SIZES["cpu"].inductor_code
