"""Tests of `perflab.memory.plots`."""

from __future__ import annotations

import pytest

from perflab.core.errors import InputError
from perflab.memory import plots

from .helpers import MiB, _gpu_report


def test_step_bars_add_the_devices_view_from_reserved_and_nvml_used_bytes():
    rep = _gpu_report()
    peak = rep.peak_bytes
    assert peak == (100 + 1 + 200 + 100) * MiB + 100 * MiB  # the optimizer step's temporaries
    bars = plots.step_bars(rep)
    assert bars["device\n(NVML used)"] == {"allocated at the peak": peak,
                                           "allocator cache (reserved − allocated)": 16 * MiB,
                                           "CUDA context, kernels, other processes": 900 * MiB - peak - 16 * MiB}
    bars = plots.step_bars(_gpu_report(used=None))  # neither NVML nor the driver answered
    assert list(bars["device\n(NVML used)"]) == ["allocated at the peak", "allocator cache (reserved − allocated)"]


def test_phases_figure_draws_the_reserved_bytes_of_a_gpu_run():
    import matplotlib.pyplot as plt

    fig = plots.phases_figure(_gpu_report())
    ax = fig.axes[0]
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "reserved by the cache"]
    assert list(line.get_ydata())[0] == 101 + 8  # MiB: the run tops out below 1 GiB
    assert ax.get_title() == "tiny-gpt b=2 s=32 fp32 adamw on test GPU"
    plt.close(fig)


def test_timeline_figure_refuses_a_run_without_a_timeline():
    with pytest.raises(InputError, match=r"^no allocation timeline for this device \(the CPU run records one"):
        plots.timeline_figure(_gpu_report())


@pytest.mark.parametrize("kw, why", [
    (dict(measure=False), "measurement off"),
    (dict(optimizer="adafactor"), "prediction only (torch ships adamw, adamw-fused, sgd)"),
    (dict(zero=1, dp=2), "ZeRO/data parallelism needs several GPUs"),
    (dict(recompute="selective"), "selective recompute: prediction only"),
    (dict(model="gpt2-xl", batch=8, seq=1024), "too large to measure in a slider"),
])
def test_memory_panel_says_why_a_choice_is_predicted_only(kw, why):
    fig, _table = plots.memory_view(**{"model": "tiny-gpt", "batch": 2, "seq": 64, **kw}, device="cpu")
    assert why in fig.axes[0].get_title()


def test_the_memory_panel_measures_what_fits_its_budgets_and_says_why_not_otherwise():
    from perflab.memory import plots as mplots

    fig, table = mplots.memory_view("tiny-gpt", batch=1, seq=32, device="cpu")
    assert "prediction only" not in fig.axes[0].get_title() and len(table.columns) >= 2  # predicted and measured
    # a step predicted to take longer than the slider's budget is not started; the title says so
    fig, table = mplots.memory_view("tiny-gpt", batch=1, seq=32, device="cpu", measure_budget_s=1e-9)
    title = fig.axes[0].get_title()
    assert "too slow to measure in a slider" in title and "perflab memory --measure --preset tiny-gpt" in title
    assert len(table.columns) == 1, table.columns  # the prediction alone
