"""Lesson 16's panel: a pure function of the granularity and the outlier size, remembered per tensor."""

import time

import torch

from perflab.numerics import panel


def test_the_panel_answers_for_every_granularity_and_remembers_its_sweeps():
    x = torch.randn(256, 512, generator=torch.Generator().manual_seed(0))
    for g in panel.CHOICES:
        fig, text = panel.scaling(g, 64, x=x, what="made up")
        assert f"{g} scaling leaves" in text and fig.axes
    t0 = time.perf_counter()
    panel.scaling("row", 256, x=x)  # the sweeps are remembered: one comparison at the new factor
    assert panel.ROWS == 256 and panel.panel_rows(x).shape == (256, 512)
    assert time.perf_counter() - t0 < 5
    import matplotlib.pyplot as plt

    plt.close("all")
