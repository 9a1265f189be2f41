"""Tests of `perflab.gemm.sizes`: lesson 04's sizes by kind of run."""

from __future__ import annotations

import torch

from perflab.core.sizes import for_run
from perflab.gemm.sizes import TILES


def test_each_kind_of_run_has_its_sizes_and_the_gpu_the_largest():
    assert set(TILES) == {"smoke", "cpu", "gpu"}
    smoke, cpu, gpu = TILES["smoke"], TILES["cpu"], TILES["gpu"]
    assert for_run(TILES, True, "cuda") is smoke and for_run(TILES, False, "cpu") is cpu
    assert for_run(TILES, False, torch.device("cuda", 0)) is gpu
    assert len(smoke.sweep_values) < len(cpu.sweep_values) < len(gpu.sweep_values)
    assert smoke.heads_h < cpu.heads_h < gpu.heads_h and smoke.mamf_values[-1] < cpu.mamf_values[-1] < gpu.mamf_values[-1]
    assert smoke.sweep_rep_ms < cpu.sweep_rep_ms and smoke.mamf_rep_ms < cpu.mamf_rep_ms < gpu.mamf_rep_ms


def test_a_gpu_sweeps_the_guides_gemm_and_every_row_names_it():
    gpu = TILES["gpu"]
    assert gpu.sweep_fixed == gpu.guide_fixed == {"m": 2304, "k": 4096} and gpu.sweep_values == gpu.guide_values
    assert (gpu.guide_values[0], gpu.guide_values[-1], gpu.guide_values[1] - gpu.guide_values[0]) == (128, 6144, 32)
    assert len({(s.guide_fixed["m"], s.guide_fixed["k"], s.guide_n) for s in TILES.values()}) == 1


def test_every_head_split_and_triton_check_fits_its_sizes():
    from perflab.gemm import heads

    for s in TILES.values():
        assert heads.head_splits(s.heads_h, s.heads_min_d, s.heads_max_d)
        assert all(b > 0 and (b & (b - 1)) == 0 for b in s.triton_tile)  # Triton's blocks are powers of two
        m, n, k = s.triton_shape
        assert m * k + k * n + m * n <= 3 * 2048 * 2048  # what the interpreter checks on a CPU


def test_lesson_05_searches_the_published_sweep_on_a_gpu_and_less_elsewhere():
    from perflab.gemm import swiglu
    from perflab.gemm.sizes import SWIGLU

    assert set(SWIGLU) == {"smoke", "cpu", "gpu"}
    gpu = SWIGLU["gpu"]
    # the published H100 search (S. Bekman's swiglu-maf-bench): h = 4096, widths 10822..11022 in steps of 4
    assert (gpu.h, gpu.tokens) == (4096, 8192) and len(swiglu.candidate_widths(gpu.h, gpu.radius, gpu.step)) == 51
    widths = {k: len(swiglu.candidate_widths(s.h, s.radius, s.step)) for k, s in SWIGLU.items()}
    assert widths["smoke"] < widths["cpu"] < widths["gpu"]
    assert SWIGLU["smoke"].rep_ms < SWIGLU["cpu"].rep_ms < gpu.rep_ms
