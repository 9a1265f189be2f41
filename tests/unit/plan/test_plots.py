"""Tests of `perflab.plan.plots`: the memory figure and the panel's view."""

from __future__ import annotations

from functools import partial

from perflab.plan import plots

from .factories import tiny_gpt


def test_the_panel_plans_a_layout_once_and_draws_every_part():
    import matplotlib.pyplot as plt

    build = partial(tiny_gpt, 2, 32)
    line, fig = plots.explore(build, 2, 1, True, "none")
    assert "peak" in line and "fits" in line and "MFU bound" in line
    again = plots.cached_plan(build, gpus=2, fsdp=True)
    assert plots.explore(build, 2, 1, True, "none")[0] == line and again.layout.fsdp
    labels = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    assert labels == {"parameters", "gradients", "optimizer state", "activations", "temporaries", "usable"}
    plt.close("all")
