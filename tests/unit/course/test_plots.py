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


def test_lesson_figures_mark_what_was_measured_on_a_busy_machine():
    import types

    import matplotlib.pyplot as plt

    from perflab.core import machine
    from perflab.core.quietness import Quietness
    from perflab.core.roofline import Roofline
    from perflab.course import plots
    from perflab.flops import rates

    quiet = Quietness("quiet", 0.0, 1.0, 2, 0.0, 2, "")
    busy = Quietness("disturbed", 0.6, 1.0, 2, 1.2, 2, "other programs used 60 % of 2 cores")
    mm = machine.DtypeMatmuls(128, (machine.MatmulPoint("fp32", 128, 1e-5, 0.4, 0.33, 1e-7, quiet),
                                    machine.MatmulPoint("bf16", 128, 1e-5, 0.1, 5.3, 1e-3, busy)), "estimate")
    cp = machine.CopySweep((machine.CopyPoint(2**20, 100.0, 1e-5, quiet), machine.CopyPoint(2**24, 50.0, 1e-3, busy)),
                           2**23, caches=(("L3", 2**23),))
    add = types.SimpleNamespace(numel=2**16, median_s=1e-5, tflops=1e-3, gbps=50.0, intensity=1 / 12, quietness=busy)
    run = rates.RooflineRun("fp32", (rates.RooflinePoint(64, 10.7, 1e-5, 0.05, 0.15, busy),), add,
                            types.SimpleNamespace(gbps=50.0, quietness=quiet), Roofline(0.33e12, 50e9), "measured copy")
    figs = [plots.dtype_bars(mm, "this CPU"), plots.copy_curve(cp, "this CPU"), plots.sweep_roofline(run, "this CPU")]
    try:
        for f in figs:
            assert plots.BUSY_LABEL in f.axes[0].get_legend_handles_labels()[1], f.axes[0].get_title()
        assert "(machine busy)" in " ".join(t.get_text() for t in figs[0].axes[0].texts)
        assert figs[0].axes[0].get_title() == "128³ matmul on this CPU"
        assert "estimate peak" in figs[0].axes[0].get_legend_handles_labels()[1]
    finally:
        for f in figs:
            plt.close(f)
