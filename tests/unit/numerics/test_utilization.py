"""MFU of a step with fp8 and bf16 GEMMs under both conventions, through perflab.flops.mfu.utilization."""

import pytest

from perflab.core.hardware import by_id
from perflab.numerics import utilization as U
from perflab.workload.models import preset

H100 = by_id("h100-sxm")


def _step(f8: float, f16: float, seconds: float) -> U.MixedStep:
    return U.MixedStep("x", 1, "h100", {"fp8": f8, "bf16": f16}, {"fp8": seconds, "bf16": 0.0}, 0.0,
                       {"fp8": U._basis(H100, "fp8"), "bf16": U._basis(H100, "bf16")}, "test")


def test_the_two_conventions_divide_by_different_peaks():
    s = _step(1e12, 0.5e12, 2e-3)
    one, own = s.conventions()
    assert one.mfu == pytest.approx(1.5e12 / (989.4e12 * 2e-3))
    assert own.mfu == pytest.approx((1e12 / 1978.9e12 + 0.5e12 / 989.4e12) / 2e-3)
    assert one.mfu / own.mfu == pytest.approx(own.effective_tflops / 989.4)
    half = s.conventions(0.5)[1]
    assert half.mfu == pytest.approx(own.mfu / 2)


def test_against_the_bf16_peak_an_fp8_step_can_pass_100_percent_and_is_not_shown():
    s = _step(1e12, 0.0, 1e12 / 1978.9e12)  # every FLOP fp8, at the fp8 peak
    one, own = s.conventions()
    assert own.mfu == pytest.approx(1.0) and one.mfu is None and one.text().startswith("not shown")


def test_the_example_step_counts_every_linear_gemm_three_times():
    cfg = preset("llama2-7b")
    s = U.mixed_step(cfg, 4096, 4096)
    per_layer = sum(i * o for _n, i, o in U.linear_gemms(cfg))
    assert s.flops["fp8"] == pytest.approx(6 * 4096 * per_layer * cfg.layers)
    assert s.flops["bf16"] > 0 and s.cast_s > 0 and s.seconds["fp8"] > s.cast_s
    assert s.table().shape == (3, 4) and s.flops_table().shape == (2, 4)
    assert U.published_rates([{"dtype": "bf16", "tflops": 794.5}, None]) == {"bf16": 794.5}
