"""Peaks per dtype: the table's dense figure for a known accelerator, 'peak unknown' otherwise."""

import pytest
import torch

from perflab.audit.peaks import select_peak, utilization
from perflab.core.hardware import by_id


def test_a_known_accelerator_gets_its_own_dense_peak_per_dtype():
    h100 = by_id("h100-sxm")
    for dt in ("bf16", "fp8", "tf32"):
        c = select_peak("NVIDIA H100 80GB HBM3", "cuda", dt)
        assert c.tflops == h100.peak(dt) and "dense" in c.source


@pytest.mark.parametrize("name, kind", [("NVIDIA GeForce Quantum 9000", "cuda"), ("AMD EPYC 9654", "cpu")])
def test_an_unknown_device_never_borrows_a_peak(name, kind):
    c = select_peak(name, kind, "bf16")
    assert c.tflops is None and "peak unknown" in c.source


def test_each_dtype_is_divided_by_its_own_peak():
    h100 = by_id("h100-sxm")
    bf, f32 = h100.peak("bf16"), h100.peak("tf32")
    flops = {"bf16": 9e12, "tf32": 1e12}
    u = utilization(1.0, flops, flops, device=torch.device("cuda"), device_name="NVIDIA H100 80GB HBM3")
    ideal = 9e12 / (bf * 1e12) + 1e12 / (f32 * 1e12)
    assert u.mfu == pytest.approx(ideal) and u.peak_tflops == pytest.approx(10e12 / ideal / 1e12)
    # neither all at the bf16 peak nor all at the tf32 one
    assert 10e12 / (bf * 1e12) < u.mfu < 10e12 / (f32 * 1e12)


def test_unknown_peak_uses_the_measured_ceiling_for_the_dtype_that_ran():
    asked = []

    def ceiling(dev, dtype, shapes):
        asked.append(dtype)
        return 2.0, f"measured {dtype}"

    u = utilization(0.5, {"bf16": 1e12}, {"bf16": 1.2e12}, device=torch.device("cpu"), device_name="AMD EPYC",
                    ceiling=ceiling)
    assert asked == ["bf16"] and u.peak_tflops is None
    assert u.mfu == pytest.approx(1e12 / 2e12 / 0.5) and u.hfu == pytest.approx(1.2e12 / 2e12 / 0.5)
    assert "peak unknown" in u.basis and "measured bf16" in u.basis
