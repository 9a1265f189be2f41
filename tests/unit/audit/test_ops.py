"""The step's ops: calls and bytes per aten op, the top ops on the roofline with the bound it gives them,
and the ops the FLOP counter has no formula for, named with their time (a small step, counted and
profiled here)."""

import pytest
import torch

from perflab.audit.ops import OpStats, bandwidth, top_ops, uncounted
from perflab.audit.report import Ceilings
from perflab.flops.counter import count_flops
from perflab.profiling.trace import load
from perflab.tune.waterfall import profile_steps

from . import factories as F


@pytest.fixture(scope="module")
def counted():
    lin = torch.nn.Linear(64, 32)
    x = torch.randn(16, 64)

    def step():
        lin.zero_grad(set_to_none=True)
        lin(x).square().mean().backward()

    stats = OpStats()
    with stats:
        fc = count_flops(step)
    return fc, stats, load(profile_steps(step, torch.device("cpu"), steps=2))


def test_op_stats_count_calls_bytes_and_product_shapes(counted):
    _, stats, _ = counted
    assert stats.calls["addmm"] == 1 and stats.calls["mm"] == 1  # the forward; the weight gradient
    # addmm reads bias (32), x (16×64), Wᵀ (64×32) and writes 16×32, in fp32
    assert stats.bytes["addmm"] == 4 * (32 + 16 * 64 + 64 * 32 + 16 * 32)
    assert stats.shapes[(16, 32, 64)] == 2 * 16 * 32 * 64
    # by (m, n, k), calls per step: the forward x·Wᵀ (16, 32, 64), the weight's gradient gᵀ·x (32, 64, 16)
    assert dict(stats.gemm_calls) == {(16, 32, 64): 1, (32, 64, 16): 1}


def test_top_ops_are_bound_against_the_roofline_only_when_it_is_known(counted):
    fc, stats, trace = counted
    rows = top_ops(trace, fc, stats, Ceilings(flops=1e12, bytes=1e9))
    assert rows and [r.self_s for r in rows] == sorted((r.self_s for r in rows), reverse=True)
    mm = next(r for r in rows if r.name == "aten::addmm")
    assert mm.flops == 2 * 16 * 32 * 64 and mm.flops_per_s == pytest.approx(mm.flops / mm.self_s)
    assert mm.bound == "memory"  # 2·16·32·64 FLOPs over ~15 kB: below the ridge of 1000 FLOPs per byte
    assert all(r.bound is None for r in top_ops(trace, fc, stats, Ceilings(flops=1e12, bytes=0.0)))
    assert len(top_ops(trace, fc, stats, Ceilings(1e12, 1e9), n=2)) <= 2


def test_a_custom_kernel_is_named_with_its_calls_and_time():
    built = F.custom_kernel()
    model, (x, _) = built["model"], built["batches"][0]

    def step():
        model.zero_grad(set_to_none=True)
        model(x).square().mean().backward()

    fc = count_flops(step)
    (u,) = uncounted(load(profile_steps(step, torch.device("cpu"), steps=2)), fc)
    assert u.name == "perflab_audit_test::opaque_mm" and u.calls == 3 and u.time_s and u.time_s > 0
    assert uncounted(load(profile_steps(step, torch.device("cpu"))), count_flops(lambda: x @ x.t())) == []


def test_the_copy_bandwidth_is_a_rate_in_bytes_per_second():
    bw = bandwidth(torch.device("cpu"))
    assert bw is None or bw > 1e6
