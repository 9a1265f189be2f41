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


def test_the_memory_panel_refuses_a_sequence_longer_than_the_models_context():
    with pytest.raises(InputError, match=r"^seq=1024 is longer than tiny-gpt's context of 128: choose seq ≤ 128$"):
        plots.memory_view("tiny-gpt", batch=2, seq=1024, device="cpu")


def test_a_large_model_shows_the_prediction_alone():
    fig, table = plots.memory_view(model="llama2-7b", batch=2, precision="mixed", zero=3, dp=8, recompute="selective",
                                   seq=4096, device="cpu")
    assert list(table.columns) == ["predicted (sum of parts) (MiB)"] and "prediction only" in fig.axes[0].get_title()
    assert table.loc["total", "predicted (sum of parts) (MiB)"].replace(",", "").isdigit()


def test_the_anatomy_of_a_step_and_its_timeline_by_device():
    import matplotlib.pyplot as plt

    from perflab.memory import estimate
    from perflab.workload.models import preset

    rep = _gpu_report()
    est = estimate.estimate(cfg=preset("tiny-gpt"), precision="fp32", optimizer="adamw", batch=2,
                            activation_model="perflab")
    fig, table = plots.step_anatomy(rep, est, title="t")
    try:
        assert list(table.columns) == ["predicted (sum of parts) (MiB)", "predicted peak (phase model) (MiB)",
                                       "measured peak (torch allocator) (MiB)", "device (NVML used) (MiB)"]
        assert table.loc["master_weights", "device (NVML used) (MiB)"] == "–"  # a bar without that part
        assert table.loc["total", "device (NVML used) (MiB)"] == "900.0"
    finally:
        plt.close(fig)
    assert plots.step_timeline(rep) is None  # a GPU's history is the memory snapshot's
