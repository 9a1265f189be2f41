"""Tests of `perflab.gemm.plots`."""

from __future__ import annotations

from perflab.gemm import (
    plots,
)


def test_figures_draw_onto_the_callers_axis():
    import matplotlib.pyplot as plt
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
        lines = {ln.get_label(): ln.get_ydata()[0] for ln in f.axes[0].get_lines()}
        assert lines["published MAMF, H100 SXM: 700 TFLOP/s"] == 700.0
    finally:
        plt.close(f)
