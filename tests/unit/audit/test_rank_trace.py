"""One rank's trace read as HolisticTraceAnalysis reads it: GPU events classified by name, the launch of
each, the steps, HTA's filter of the last step, and the spans arithmetic."""

import math
from pathlib import Path

import pytest

from perflab.audit.rank_trace import (
    hta_filter,
    kernel_type,
    length,
    merge,
    overlap,
    read_rank,
    steps_text,
)
from perflab.core.errors import InputError

from .jobs import rank_trace


def test_kernel_types_follow_hta():
    assert kernel_type("ncclDevKernel_AllReduce_Sum_f32_RING_LL") == "communication"
    assert kernel_type("Memcpy DtoH (Device -> Pinned)") == "memory"
    assert kernel_type("Memset (Device)") == "memory"
    assert kernel_type("Stream Sync") == "other"
    assert kernel_type("void at::native::vectorized_elementwise_kernel<4>") == "compute"


def test_spans_merge_and_overlap():
    a = merge([(5.0, 8.0), (0.0, 2.0), (1.0, 3.0), (4.0, 4.0)])  # the empty span is dropped
    assert a == [(0.0, 3.0), (5.0, 8.0)] and length(a) == 6.0
    assert overlap(a, merge([(2.0, 6.0)])) == 2.0


def test_a_planted_rank_is_read_with_its_steps_launches_and_clock():
    rt = read_rank(Path("rank1.json"), rank_trace(1, 4, steps=(7, 8)), only_one=False)
    assert (rt.rank, rt.world_size, rt.device_name, rt.on_gpu) == (1, 4, "NVIDIA H100 80GB HBM3", True)
    assert sorted(rt.steps) == [7, 8] and steps_text(rt.steps) == "ProfilerStep#7–#8"
    assert [g.kind for g in rt.gpu] == ["compute", "communication"] * 2
    assert all(rt.launch_ts[g.correlation] < g.start for g in rt.gpu)  # each kernel runs after its launch
    assert rt.clock_offset_us == 0.0 and not math.isinf(rt.last_step_start)


def test_hta_leaves_out_what_the_last_step_launched():
    rt = read_rank(Path("rank0.json"), rank_trace(0, 2, steps=(1, 2, 3)), only_one=False)
    kept = hta_filter(rt, step_names=3)
    assert len(rt.gpu) == 6 and len(kept) == 4  # the third step's two kernels are out
    assert hta_filter(rt, step_names=1) == rt.gpu


def test_a_rank_without_its_rank_or_its_steps_is_one_line():
    raw = {**rank_trace(0, 2), "distributedInfo": {}}
    with pytest.raises(InputError, match="no distributedInfo rank"):
        read_rank(Path("x.json"), raw, only_one=False)
    assert read_rank(Path("x.json"), raw, only_one=True).rank == 0  # one trace: rank 0 of a one-process job
    bare = {**rank_trace(0, 1), "traceEvents": [e for e in rank_trace(0, 1)["traceEvents"]
                                                if "ProfilerStep" not in e["name"]]}
    with pytest.raises(InputError, match="x.json has no ProfilerStep"):
        read_rank(Path("x.json"), bare, only_one=True)
