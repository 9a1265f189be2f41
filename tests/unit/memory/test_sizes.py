"""Tests of `perflab.memory.sizes`: lesson 03's sizes by kind of run."""

from __future__ import annotations

import torch

from perflab.core.sizes import for_run
from perflab.memory.sizes import SIZES
from perflab.workload.models import param_count, preset


def test_each_kind_of_run_has_its_sizes_and_the_gpu_the_largest():
    assert set(SIZES) == {"smoke", "cpu", "gpu"}
    smoke, cpu, gpu = SIZES["smoke"], SIZES["cpu"], SIZES["gpu"]
    assert for_run(SIZES, True, "cuda") is smoke and for_run(SIZES, False, "cpu") is cpu
    assert for_run(SIZES, False, torch.device("cuda", 0)) is gpu
    assert param_count(preset(smoke.model)) < param_count(preset(cpu.model)) < param_count(preset(gpu.model))
    assert smoke.batch < cpu.batch < gpu.batch and smoke.bench_rep_ms < cpu.bench_rep_ms
    # a GPU times more checkpointed steps for a steadier ratio; a CPU one round of at least 3
    assert (cpu.ck_rounds, cpu.ck_min_reps) == (1, 3) and (gpu.ck_rounds, gpu.ck_min_reps) == (2, 5)


def test_the_panels_first_batch_is_a_power_of_two_it_offers():
    assert all(s.batch & (s.batch - 1) == 0 and 1 <= s.batch <= 64 for s in SIZES.values())
