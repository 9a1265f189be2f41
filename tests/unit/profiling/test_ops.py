"""Tests of `perflab.profiling.ops`."""

from __future__ import annotations

import copy
import math

from perflab.profiling import ops, trace


def _with_gemms(dims_by_op):
    raw = trace.synthetic_step(None, steps=1)
    base = next(e for e in raw["traceEvents"] if e.get("name") == "aten::mm")
    for i, (name, dims) in enumerate(dims_by_op):
        e = copy.deepcopy(base)
        e.update(name=name, ts=base["ts"] + 1 + i, dur=50.0, args={"Input Dims": dims})
        raw["traceEvents"].append(e)
    raw["traceEvents"].append({"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "pt_autograd_0"}})
    return trace.load(raw)


def _trace_with(events):
    return {"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "args": {}, **e} for e in events]}


def test_gemm_shapes_of_batched_matmuls_and_unusable_shapes():
    t = _with_gemms([("aten::bmm", [[4, 8, 16], [4, 16, 32]]),
                     ("aten::baddbmm", [[4, 8, 32], [4, 8, 16], [4, 16, 32]]),
                     ("aten::bmm", [[8, 16]]),  # a shape list the op cannot have: skipped, not a crash
                     ("aten::addmm", "not dims")])
    rows = [r for r in ops.gemm_shapes(t) if r.op in ("aten::bmm", "aten::baddbmm", "aten::addmm")]
    assert [(r.op, r.shape, r.flops) for r in rows] == [("aten::bmm", "4×8×16×32", 2.0 * 4 * 8 * 16 * 32),
                                                                  ("aten::baddbmm", "4×8×16×32", 2.0 * 4 * 8 * 16 * 32)]
    assert t.threads() == {1: "main thread", 7: "pt_autograd_0"}


def test_gemm_efficiency_from_shapes():
    from perflab.profiling import ops

    t = _trace_with([
        {"name": "ProfilerStep#1", "cat": "user_annotation", "ts": 0, "dur": 1000},
        {"name": "aten::mm", "cat": "cpu_op", "ts": 10, "dur": 100, "args": {"Input Dims": [[64, 32], [32, 16]]}},
        {"name": "aten::addmm", "cat": "cpu_op", "ts": 200, "dur": 100,
         "args": {"Input Dims": [[16], [64, 32], [32, 16]]}},
        {"name": "aten::bmm", "cat": "cpu_op", "ts": 400, "dur": 200, "args": {"Input Dims": [[4, 8, 16], [4, 16, 2]]}},
        {"name": "aten::relu", "cat": "cpu_op", "ts": 700, "dur": 100},
    ])
    flops = 2 * 64 * 32 * 16 * 2 + 2 * 4 * 8 * 16 * 2
    eff = ops.gemm_efficiency(t, ceiling_tflops=1e-3)  # 1 GFLOP/s
    assert math.isclose(eff.gemm_s, 400e-6) and math.isclose(eff.step_s, 1e-3)
    assert math.isclose(eff.achieved_tflops, flops / 400e-6 / 1e12)
    assert math.isclose(eff.ideal_gemm_s, flops / 1e9)
    assert math.isclose(eff.outside_gemms_s, 600e-6)
    assert [r.gemm for r in eff.gemms] == ["aten::bmm 4×8×16×2", "aten::mm 64×32×16", "aten::addmm 64×32×16"]
    table = eff.table()
    assert list(table["calls per step"]) == ["1", "1", "1"] and len(table) == 3
    assert ops.tensor_core_share(t) is None  # a CPU trace has no kernels


def test_tensor_core_share_is_a_name_heuristic():
    from perflab.profiling import ops

    t = _trace_with([
        {"name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "cat": "kernel",
         "ts": 0, "dur": 300},
        {"name": "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", "cat": "kernel",
         "ts": 300, "dur": 100},
        {"name": "aten::mm", "cat": "cpu_op", "ts": 0, "dur": 10},
    ])
    assert math.isclose(ops.tensor_core_share(t).share, 0.75)


def test_the_lessons_ceiling_and_efficiency_read_as_text(tmp_path):
    import json

    import torch

    from perflab.profiling.trace import synthetic_step

    c = ops.ceiling(torch.device("cpu"), "fp32", 64, 5)
    assert c.tflops > 0 and c.source.startswith("one 64³ fp32 matmul measured now on one thread")
    assert ops.Ceiling(1.0, "stored").line() == "stored"
    from perflab.core.quietness import Quietness

    busy = Quietness("disturbed", 0.5, 1.0, 1, 0.5, 1, "other programs used 50 % of 1 core")
    assert ops.Ceiling(1.0, "one 64³ matmul", busy).line().endswith("a busy machine's ceiling: this device's may be higher")
    path = tmp_path / "t.json"
    path.write_text(json.dumps(synthetic_step(None)))
    assert ops.tensor_core_line(path).startswith("Tensor Core share: GPU traces only")
    eff = ops.gemm_efficiency(path, 1.0)
    lines = eff.text("a source").splitlines()
    assert lines[0] == "ceiling 1.00 TFLOP/s (a source)" and lines[2].startswith("at most ")
