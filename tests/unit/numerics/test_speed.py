"""fp8 against bf16: the roofline prediction for a GPU (with the casts it names), and the measured table's verdicts."""

import pytest

from perflab.core.errors import InputError, UnsupportedError
from perflab.core.hardware import by_id
from perflab.core.quietness import Quietness
from perflab.numerics import speed
from perflab.workload.models import preset

QUIET = Quietness("quiet", 0.0, 1.0, 2, 0.0, 2, "")
BUSY = Quietness("disturbed", 0.6, 1.0, 2, 1.2, 2, "other programs used 60 % of 2 cores")


def test_fp8_on_an_h100_at_8192_is_twice_bf16_less_the_named_casts():
    """Lesson 16's done-when figure: within 10 % of the datasheet's 2× minus the casts."""
    p = speed.predict(8192, 8192, 8192, "h100-sxm")
    spec = by_id("h100-sxm")
    assert p.rate_ratio == pytest.approx(spec.peak("fp8") / spec.peak("bf16")) == pytest.approx(2.0, rel=1e-3)
    expected = p.bf16_s / p.rate_ratio + p.cast_s
    assert abs(p.fp8_s - expected) / expected < 0.10
    assert p.bf16_s == pytest.approx(2 * 8192**3 / (spec.peak("bf16") * 1e12))
    assert 1.4 < p.speedup < 1.5 and "1.47×" in p.text()


def test_the_four_passes_and_their_bytes():
    m, n, k = 1024, 2048, 4096
    p = speed.predict(m, n, k)
    assert [ps.bytes for ps in p.passes] == [2 * m * k, 2 * k * n, 3 * m * k, 3 * k * n]
    bw = by_id("h100-sxm").memory_bandwidth_gbps * 1e9
    assert p.cast_s == pytest.approx(5 * (m * k + k * n) / bw)
    assert p.passes_table().shape == (5, 2)


def test_fp8_wins_from_a_size_and_a_small_model_loses():
    c = speed.crossover("h100-sxm")
    assert 2048 < c < 4096 and c % 16 == 0
    assert speed.predict(c, c, c).speedup > 1 >= speed.predict(c - 16, c - 16, c - 16).speedup
    tiny = speed.predict(*speed.model_gemm(preset("tiny-gpt"), 1024))
    assert tiny.speedup < 1
    t = speed.predictions([("tiny", speed.model_gemm(preset("tiny-gpt"), 1024)), ("big", (8192, 8192, 8192))]).table()
    assert list(t.index) == ["tiny", "big"]


def test_chips_without_fp8_and_unknown_ones_are_refused():
    with pytest.raises(UnsupportedError, match="no fp8 peak"):
        speed.predict(1024, 1024, 1024, "a100-sxm-80gb")
    with pytest.raises(InputError, match="unknown accelerator"):
        speed.predict(1024, 1024, 1024, "h900")


def test_given_rates_replace_the_peaks():
    p = speed.predict(8192, 8192, 8192, rates={"bf16": 794.5, "fp8": 1402.6})
    assert p.basis == "given rates" and p.bf16_s == pytest.approx(2 * 8192**3 / 794.5e12)


def test_the_verdict_withholds_a_conclusion_from_a_busy_machine():
    rows = [speed.GemmTiming(128, 1e-4, 0.1, 0.02, 0.02, QUIET), speed.GemmTiming(192, 2e-4, 0.4, 0.02, 0.02, QUIET)]
    quiet = speed.SpeedTable("a CPU", "cpu", list(rows))
    assert "no fp8 matrix units" in quiet.verdict() and quiet.headline() == pytest.approx(2000)
    busy = speed.SpeedTable("a CPU", "cpu", rows[:1] + [speed.GemmTiming(192, 2e-4, 0.4, 0.02, 0.02, BUSY)])
    assert busy.verdict().startswith("inconclusive: the machine was busy (192³") and busy.headline() is None
    gpu = speed.SpeedTable("an H100", "cuda", [speed.GemmTiming(8192, 1.2e-3, 0.8e-3, 0.01, 0.01, QUIET)])
    assert gpu.verdict().startswith("fp8 ran at 1.50× bf16's speed at 8192³")
    assert speed.SpeedTable("x", "cpu", skipped="fp8 not measured here: no").verdict().startswith("fp8 not measured")


def test_measuring_on_this_cpu_gives_one_row_per_size():
    t = speed.measure([16], "cpu", rep_ms=1, min_reps=2, progress=False)
    assert [r.size for r in t.rows] == [16] and all(r.bf16_s > 0 and r.fp8_s > 0 for r in t.rows)
    assert t.table().shape == (1, 5)
    with pytest.raises(InputError, match="multiples of 16"):
        speed.measure([20], "cpu", progress=False)


def test_fp8_peaks_in_the_hardware_table_are_ada_hopper_and_blackwell():
    from perflab.core.hardware import accelerators

    with_fp8 = {a.id for a in accelerators() if a.peak("fp8")}
    assert {"l4", "l40s", "rtx-4090", "h100-sxm", "h100-pcie", "h200-sxm", "b200"} <= with_fp8
    assert not with_fp8 & {"a100-sxm-80gb", "a10", "rtx-3090", "v100-sxm2-16gb"}


def test_scaled_mm_takes_rowwise_scales_outside_the_sum():
    import torch

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(32, 64, generator=g), torch.randn(48, 64, generator=g)
    sa, sb = a.abs().amax(1, keepdim=True) / 448, b.abs().amax(1, keepdim=True) / 448
    a8, b8 = (a / sa).to(torch.float8_e4m3fn), (b / sb).to(torch.float8_e4m3fn)
    y = torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb.t(), out_dtype=torch.float32)  # M×1 and 1×N
    assert torch.allclose(y, (a8.float() * sa) @ (b8.float() * sb).t(), rtol=1e-4, atol=1e-4)


def test_the_example_shapes_and_the_curve():
    names = [n for n, _ in speed.example_shapes()]
    assert names[:3] == ["1024³", "4096³", "8192³"] and any("tiny-gpt" in n for n in names)
    c = speed.curve()
    assert [p.m for p in c][:2] == [256, 512] and c[-1].speedup > c[0].speedup
