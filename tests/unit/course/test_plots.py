"""Tests of `perflab.course.plots`."""

import pytest

from perflab.core.errors import InputError

pytest.importorskip("ipywidgets")


def test_the_roofline_slider_refuses_a_size_it_cannot_measure_in_its_budget():
    # A slider answers in about a second: a size predicted to take longer is refused in one line that
    # names the largest size that fits and the command that times it once (no minute-long freeze,
    # e.g. a 4096³ bf16 matmul on a CPU without native bf16).
    from perflab.core.device import describe, pick_device
    from perflab.core.hardware import peaks_for
    from perflab.course import plots

    dev = pick_device("cpu")
    info, peaks = describe(dev), peaks_for(describe(dev))
    with pytest.raises(InputError, match=r"512³ fp32 would take about .* choose n ≤ \d+.*perflab matmul --m 512"):
        plots.measure_on_roofline(512, "fp32", dev, info, peaks, rep_ms=5, warmup_ms=1, budget_s=1e-6)
    fig, r = plots.measure_on_roofline(128, "fp32", dev, info, peaks, rep_ms=5, warmup_ms=1, budget_s=None)
    assert r.tflops > 0 and fig.axes
    call_s, rate = plots.predicted_call_s(128, "fp32", dev)
    assert rate > 0 and call_s == pytest.approx(2 * 128**3 / (rate * 1e12))
    fast, assumed = plots.predicted_call_s(4096, "fp32", dev, peak_tflops=1e6)  # a spec peak bounds the guess
    assert assumed == pytest.approx(0.5e6) and fast < 1e-6
