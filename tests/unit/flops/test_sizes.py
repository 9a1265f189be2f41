"""Tests of `perflab.flops.sizes`: lesson 02's sizes by kind of run."""

from __future__ import annotations

import torch

from perflab.core.sizes import for_run
from perflab.flops.sizes import MFU
from perflab.workload.models import preset


def test_each_kind_of_run_has_its_sizes_and_the_gpu_the_largest():
    assert set(MFU) == {"smoke", "cpu", "gpu"}
    smoke, cpu, gpu = MFU["smoke"], MFU["cpu"], MFU["gpu"]
    assert for_run(MFU, True, "cuda") is smoke and for_run(MFU, False, "cpu") is cpu
    assert for_run(MFU, False, torch.device("cuda", 0)) is gpu
    assert smoke.batch * smoke.seq < cpu.batch * cpu.seq < gpu.batch * gpu.seq and smoke.steps < cpu.steps < gpu.steps
    for s in MFU.values():
        assert s.seq <= preset(s.model).seq_len and s.gc_seq <= preset("tiny-gpt").seq_len
        assert s.gas_values[0] == 1 and list(s.gas_values) == sorted(s.gas_values)
    assert smoke.ceiling_size and cpu.ceiling_size is None and gpu.ceiling_size is None  # the one shape outside smoke


def test_a_learners_parameters_override_the_table_and_the_derived_sizes_follow():
    cpu = MFU["cpu"]
    assert (cpu.gas_batch, cpu.panel_seq, cpu.panel_batch) == (4, 128, 8)
    assert MFU["gpu"].panel_seq == 128 and MFU["smoke"].panel_seq == 64 and MFU["smoke"].gas_batch == 2
    mine = cpu.with_overrides(model="tiny-llama", batch=2, seq=None, steps=3)
    assert (mine.model, mine.batch, mine.seq, mine.steps) == ("tiny-llama", 2, 128, 3)
    assert mine.gas_batch == 1 and mine.panel_batch == 2 and cpu.batch == 8  # the table itself is unchanged
