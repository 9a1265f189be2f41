"""More of the memory package's edges: the estimator's small formulas and refusals, a phase's row,
figures of GB-sized runs and of GPU rows (reserved bytes, NVML's used bytes) built from hand-made
reports, the CPU allocation tracker's events before a phase, fused AdamW missing, no /proc, and
ipyexperiments' set-up and teardown driven with a stand-in experiment class."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from perflab.core.errors import InputError, UnsupportedError
from perflab.memory import estimate as E
from perflab.memory import plots, probe
from perflab.workload.models import preset

MiB = 2**20

# ---------------------------------------------------------------- the estimator


def test_logits_and_loss_gradient_formulas():
    assert E.logits_fp32_bytes(128, 2, 50257, t=2) == 4.0 * 128 * 2 * 50257 / 2
    n = 2 * 8 * 100
    assert E.loss_gradient_bytes(2, 8, 100) == 2 * n * 4  # fp32 logits: no cast back
    assert E.loss_gradient_bytes(2, 8, 100, logits_bytes=2) == 2 * n * 4 + 2 * n


def test_perflab_model_has_no_selective_recompute():
    with pytest.raises(InputError, match=r"^perflab's model supports recompute 'none' or 'full' \(model.checkpointing = True\)$"):
        E.model_activation_bytes(preset("tiny-gpt"), 2, 32, recompute="selective")


def test_phase_predictions_refuse_an_optimizer_torch_does_not_ship():
    with pytest.raises(InputError, match=r"^phase predictions cover the optimizers torch ships: adamw, adamw-fused, sgd "
                                         r"\(got 'adafactor'; use estimate\(\) for the others\)$"):
        E.step_phases(preset("tiny-gpt"), 2, 32, optimizer="adafactor")


def test_step_phase_row_spells_out_its_parts():
    p = E.StepPhase("forward", 1, 300, 400, {"weights": 100, "activations": 200}, "fp32 logits")
    assert p.as_dict() == {"phase": "forward", "iteration": 1, "end_bytes": 300, "peak_bytes": 400,
                           "peak_note": "fp32 logits", "weights_bytes": 100, "activations_bytes": 200}


# ---------------------------------------------------------------- a hand-made GPU run


def _gpu_report(*, used: int | None = 900 * MiB) -> probe.PhaseReport:
    """Two iterations as measure_step_phases reports them on a GPU: allocator rows with reserved
    bytes and NVML's used bytes, each phase measured at exactly its prediction."""
    w, b, a, g, st = 100 * MiB, 1 * MiB, 50 * MiB, 100 * MiB, 200 * MiB
    plan = [("build", 0, {"weights": w, "batch": b}, 0)]
    for it in (1, 2):
        o = st if it > 1 else 0  # the first step creates the optimizer's states
        plan += [("forward", it, {"weights": w, "batch": b, "optimizer_states": o, "activations": a}, 30 * MiB),
                 ("backward", it, {"weights": w, "batch": b, "optimizer_states": o, "gradients": g}, 0),
                 ("optimizer step", it, {"weights": w, "batch": b, "optimizer_states": st, "gradients": g}, 100 * MiB),
                 ("zero_grad", it, {"weights": w, "batch": b, "optimizer_states": st}, 0)]
    predicted, rows, start = [], [], 0
    for phase, it, parts, extra in plan:
        end = sum(parts.values())
        p = E.StepPhase(phase, it, end, max(start, end) + extra, parts, "")
        predicted.append(p)
        rows.append({"phase": phase, "iteration": it, "start_bytes": start, "allocated_bytes": end,
                     "peak_bytes": p.peak_bytes, "reserved_bytes": p.peak_bytes + 8 * MiB,
                     "reserved_peak_bytes": p.peak_bytes + 16 * MiB, "device_used_bytes": used, "seconds": 0.01})
        start = end
    meta = {"model": "tiny-gpt", "batch": 2, "seq": 32, "dtype": "fp32", "optimizer": "adamw",
            "checkpointing": False, "device": "test GPU", "timeline": None, "phase_ranges": None}
    return probe.PhaseReport(rows, predicted, meta)


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


def test_compare_shows_reserved_and_nvml_columns_for_gpu_rows():
    df = _gpu_report().compare()
    assert df["reserved (MiB)"].iloc[0] == 101 + 8 and df["NVML used (MiB)"].iloc[0] == 900
    assert "RSS (MiB)" not in df.columns and df["peak gap"].abs().max() == 0


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


def test_gib_sized_bars_with_the_devices_capacity():
    import matplotlib.pyplot as plt

    assert plots._unit(2 * E.GiB) == (E.GiB, "GiB")
    fig = plots.stacked_bars({"run": {"weights": 2 * E.GiB, "activations": E.GiB}}, capacity=4 * E.GiB,
                             capacity_label="16 GB card")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "memory (GiB)"
    assert [list(ln.get_ydata()) for ln in ax.get_lines()] == [[4.0, 4.0]]  # the capacity line, in GiB
    assert " 16 GB card" in [t.get_text() for t in ax.texts]
    plt.close(fig)


# ---------------------------------------------------------------- the CPU tracker and the process


def test_per_phase_counts_allocations_made_before_the_phase_as_its_start():
    tr = object.__new__(probe._CPUAllocations)  # its events, without starting a profiler
    tr.events = [(1, 100), (2, 50), (5, 30), (6, -20), (9, 7)]
    tr.ranges = [(4, 7, "perflab-phase:forward#1")]
    assert tr.per_phase() == [{"mark": "forward#1", "start_bytes": 150, "allocated_bytes": 160, "peak_bytes": 180}]


def test_nothing_saved_gives_an_empty_table():
    assert probe.SavedTensors(0, []).by_shape().empty


def test_fused_adamw_missing_from_torch_is_one_line(monkeypatch):
    real = torch.optim.AdamW

    def old_adamw(params, lr, **kw):
        if "fused" in kw:
            raise TypeError("__init__() got an unexpected keyword argument 'fused'")
        return real(params, lr=lr, **kw)

    monkeypatch.setattr(torch.optim, "AdamW", old_adamw)
    with pytest.raises(UnsupportedError, match=r"^fused AdamW is not available here \(.*'fused'\): use adamw$"):
        probe.make_optimizer("adamw-fused", [torch.nn.Parameter(torch.ones(2))])


def test_without_proc_there_is_no_peak_rss_and_no_reset(monkeypatch):
    def no_proc(path, *a, **kw):
        raise FileNotFoundError(2, "No such file or directory", path)

    monkeypatch.setattr(probe, "open", no_proc, raising=False)  # as on macOS: no /proc/self
    assert probe.rss_peak_bytes() is None
    assert probe.reset_rss_peak() is False


# ---------------------------------------------------------------- ipyexperiments, with a stand-in


class _Experiment:
    """The part of ipyexperiments' experiment classes that perflab uses."""

    def __init__(self, **kwargs):
        self.kwargs, self.kept, self.cl = kwargs, (), None

    def keep_var_names(self, *names):
        self.kept += names

    def finish(self):
        return {"consumed": 0, "reclaimed": 0, "kept": self.kept}


def _fake_kernel(monkeypatch):
    import IPython

    from perflab.core import extras

    def need(name, *a):
        os.environ["CUDA_MODULE_LOADING"] = "EAGER"  # what importing ipyexperiments does to the process
        return SimpleNamespace(IPyExperimentsCPU=_Experiment, IPyExperimentsPytorch=_Experiment)

    monkeypatch.setattr(IPython, "get_ipython", lambda: SimpleNamespace(kernel=object()))
    monkeypatch.setattr(extras, "need", need)


def test_cell_experiment_restores_cuda_module_loading_and_keeps_names(monkeypatch):
    _fake_kernel(monkeypatch)
    monkeypatch.setenv("CUDA_MODULE_LOADING", "LAZY")
    exp = probe.cell_memory_experiment(cell_logger=False, keep=("model", "data"))
    assert os.environ["CUDA_MODULE_LOADING"] == "LAZY"
    assert exp.kept == ("model", "data") and exp.kwargs == {"cl_enable": False, "cl_compact": True}
    monkeypatch.delenv("CUDA_MODULE_LOADING")
    exp = probe.cell_memory_experiment()
    assert "CUDA_MODULE_LOADING" not in os.environ and exp.kept == ()


def test_finish_keeps_the_named_variables_and_pausing_without_a_logger_changes_nothing():
    exp = _Experiment()
    assert probe.finish_experiment(exp, keep=("x",)) == {"consumed": 0, "reclaimed": 0, "kept": ("x",)}
    ran = []
    with probe.pause_cell_logger(exp):
        ran.append(exp.cl)
    assert ran == [None] and exp.cl is None
