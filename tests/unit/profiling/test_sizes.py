"""Tests of `perflab.profiling.sizes`: lesson 09's table, read as the lesson reads it."""

import torch

from perflab.core.sizes import for_run
from perflab.profiling.sizes import SIZES


def test_a_cpu_profiles_tiny_gpt_and_a_gpu_a_step_that_fills_it():
    cpu, gpu = for_run(SIZES, False, torch.device("cpu")), for_run(SIZES, False, "cuda")
    assert (cpu.preset, cpu.batch, cpu.seq, cpu.steps) == ("tiny-gpt", 4, 64, 3)
    assert (gpu.preset, gpu.batch, gpu.seq, gpu.steps) == ("gpt2-small", 8, 512, 5)
    assert cpu.faults.launch_rows == 1000 and cpu.faults.sync_values is None  # the CPU's faults as they were
    assert gpu.faults.launch_rows == 5000 and gpu.faults.sync_values == 65536


def test_the_comm_fault_keeps_the_cpus_step():
    gpu = SIZES["gpu"]
    assert gpu.step_of("comm")["preset"] == "tiny-gpt" and gpu.step_of("comm")["batch"] == 4
    assert gpu.step_of("sync")["preset"] == "gpt2-small"


def test_smoke_plants_three_faults_and_fixes_two():
    s = for_run(SIZES, True, "cuda")
    assert s.planted() == ["loader", "sync", "launch"] and s.fixed() == ["sync", "launch"]
    assert SIZES["cpu"].planted() == ["loader", "sync", "launch", "comm"] == SIZES["cpu"].fixed()
    assert not s.with_stack and not s.kernel_compile and s.timelines == 1
