"""Lesson 16's figures draw from their inputs, with units on every axis."""

import torch

from perflab.core.quietness import Quietness
from perflab.numerics import cast, parity, plots, scaling, speed


def _labels(fig):
    return [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes]


def test_every_figure_draws_with_labelled_axes():
    tt = cast.trips({"w": torch.tensor([1e-3, 0.5])})
    q = Quietness("quiet", 0.0, 1.0, 2, 0.0, 2, "")
    st = speed.SpeedTable("cpu", "cpu", [speed.GemmTiming(16, 1e-5, 1e-3, 0.0, 0.0, q),
                                         speed.GemmTiming(32, 2e-5, 4e-3, 0.0, 0.0, q)])
    curve = [speed.predict(n, n, n) for n in (1024, 4096)]
    figs = [plots.formats_figure(tt.ranges), plots.speed_figure(st),
            plots.prediction_figure(curve, [("x", curve[0])], crossover=2960),
            plots.scaling_figure(scaling.compare(torch.randn(8, 64), "t", 4), {"row": [(1.0, 0.0), (4.0, 0.1)]}, "row"),
            plots.loss_figure(parity.ParityResult({"fp32": [2.0, 1.0], "fp32, random seed 1": [2.1, 1.1]}, window=1)),
            plots.speed_figure(speed.SpeedTable("mps", "mps", skipped="fp8 not measured here: no fp8 on Apple GPUs"))]
    for fig in figs:
        for x, y in _labels(fig):
            assert x and y
    import matplotlib.pyplot as plt

    plt.close("all")
