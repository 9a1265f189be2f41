"""Tests of `perflab.gemm.plots`."""

from __future__ import annotations

from perflab.gemm import (
    plots,
)


def test_figures_draw_onto_the_callers_axis():
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    try:
        assert plots.predicted_staircase("n", [128, 256, 384], {"m": 1024, "k": 1024}, sms=2, ax=axes[0]) is fig
        assert [ln.get_label() for ln in axes[0].get_lines()] == ["256×128 tiles, 2 SMs"]
        heads = pd.DataFrame({"d": [64, 128], "a": [32, 16], "tflops": [1.0, 1.5]})
        assert plots.head_sizes(heads, ax=axes[1]) is fig
        assert axes[1].get_title() == "Attention speed by head size"
        widths = pd.DataFrame({"d_ff": [10922, 10944], "tflops": [1.0, 1.2]})
        published = pd.DataFrame({"d_ff": [10922, 10944], "tflops": [500.0, 600.0]})
        assert plots.swiglu_widths(widths, 10922, published=published, ax=axes[2]) is fig
        labels = [c.get_label() for c in axes[2].collections]
        assert labels[-1] == "published (other hardware; see source)"
        assert list(axes[2].collections[-1].get_offsets()[:, 1]) == [500.0, 600.0]
    finally:
        plt.close(fig)
    search = pd.DataFrame({"stage": ["coarse", "coarse", "refine"], "mean": [1.0, 2.0, 3.0]})
    f = plots.mamf_search(search, {"tflops": 3.0, "m": 64, "n": 64, "k": 64},
                          published={"tflops": 700.0, "accelerator": "H100 SXM"})
    try:
        lines = {ln.get_label(): np.asarray(ln.get_ydata())[0] for ln in f.axes[0].get_lines()}
        assert lines["published MAMF, H100 SXM: 700 TFLOP/s"] == 700.0
    finally:
        plt.close(f)


def test_the_lessons_figures_from_their_typed_results():
    import types

    import matplotlib.pyplot as plt

    from perflab.course.reference import published, recording_sizes
    from perflab.gemm import shapes

    ex = shapes.GuideExample.from_record(published("nvidia_wave_example"))
    target = shapes.model_target(None, "a100-sxm-80gb")
    values = list(range(128, 2049, 128))
    times = [shapes.predicted_time_s(2304, n, 4096, sms=108, peak_tflops=312) for n in values]
    fit = shapes.fit_tile(values, times, "n", ex.fixed, sms=108, tflops=[1.0] * len(values), unit="SM")
    run = types.SimpleNamespace(h=256, b=1, s=32, frame=__import__("pandas").DataFrame(
        {"d": [32, 64, 128], "a": [8, 4, 2], "tflops": [1.0, 2.0, 1.5]}))
    figs = [plots.guide_staircase(ex), plots.sweep_fit(fit, device_label="a GPU"),
            plots.recording_prediction(recording_sizes("waves"), target), plots.head_sweep(run, device_label="here")]
    try:
        assert [ln.get_label() for ln in figs[0].axes[0].get_lines()][:3] == [
            "256×128 tiles, 108 SMs", "128×256 tiles, 108 SMs", "128×128 tiles, 108 SMs"]
        assert figs[0].axes[0].get_lines()[0].get_xdata()[-1] == 4608  # up to the third full wave
        assert "measured on a GPU" in figs[1].axes[0].get_legend_handles_labels()[1][0]
        assert figs[2].axes[0].get_title() == f"The model's prediction for {target.label}"
        assert figs[3].axes[0].get_title() == "h = 256, b = 1, s = 32: attention by head size"
    finally:
        for f in figs:
            plt.close(f)


def test_lesson_05s_figures_mark_a_busy_width_and_the_plan_returns_its_readable_view():
    import matplotlib.pyplot as plt
    import pandas as pd

    frame = pd.DataFrame({"d_ff": [168, 170, 176], "tflops": [1.0, 0.9, 1.2], "disturbed": [False, True, False]})
    fig = plots.swiglu_widths(frame, 170)
    try:
        labels = fig.axes[0].get_legend_handles_labels()[1]
        assert "machine busy every time: not this device's" in labels
    finally:
        plt.close(fig)
    fig, view = plots.swiglu_plan(4096, 100, 4, 8192, gpu="h100-sxm")
    try:
        assert len(view) == 10 and view["d_ff"].iloc[-1] == "10922 (⌊8/3·h⌋)"
        assert "model utilization, fwd GEMM (%)" in view.columns
        assert not {"ratio", "params_delta_pct", "baseline", "model utilization"} & set(view.columns)  # no raw names
    finally:
        plt.close(fig)
