"""Tests of `perflab.plan.plots`: the memory figure and the panel's view."""

from __future__ import annotations

from functools import partial

from perflab.plan import plots

from .factories import tiny_gpt


def test_the_panel_plans_a_layout_once_and_draws_every_part():
    import matplotlib.pyplot as plt

    build = partial(tiny_gpt, 2, 32)
    line, fig = plots.explore(2, 1, True, "none", build=build)
    assert "peak" in line and "fits" in line and "MFU" in line
    again = plots.cached_plan(build, gpus=2, fsdp=True)
    assert plots.explore(2, 1, True, "none", build=build)[0] == line and again.layout.fsdp
    legend = fig.axes[0].get_legend()
    assert legend is not None
    labels = {t.get_text() for t in legend.get_texts()}
    assert labels == {"parameters", "gradients", "optimizer state", "activations", "temporaries"}
    # 6 MB bars against 72 GB usable: the axis fits the bars and the usable memory is written at its edge
    assert fig.axes[0].get_xlim()[1] < 1 and any(t.get_text().startswith("usable: ") for t in fig.axes[0].texts)
    plt.close("all")
