"""Lesson 14's waterfall: the legend beside the bars, never over them; the two timed steps named."""

from perflab.hunt import plots
from perflab.hunt.report import Rerun
from perflab.hunt.step import PHASES, Timed


def test_the_legend_sits_outside_the_axis_and_the_totals_inside_it():
    import matplotlib.pyplot as plt

    rows = {"as given": {p: 0.002 for p in PHASES}, "with two workers": {p: 0.001 for p in PHASES}}
    fig = plots.waterfall(rows, "t")
    ax = fig.axes[0]
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # beside the axis, covering none of it
    assert ax.get_xlim()[1] > 6 * 2  # room for the longest bar's total label
    plt.close(fig)


def test_before_after_names_the_rerun_steps():
    t = {"before": Timed("before", 1.0, {"data": 1.0}, [1.0], 2.5),
         "with your fixes": Timed("with your fixes", 0.5, {"data": 0.5}, [0.5], 2.5)}
    res = Rerun(t, 1.0, 0.5, 0.5, True, 0.0)
    assert plots.before_after(res, "as drawn", "fixed") == {"as drawn": {"data": 1.0}, "fixed": {"data": 0.5}}
