"""Tests of `perflab.memory.cells`: ipyexperiments' per-cell report, set up to behave."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from perflab.core.errors import UnsupportedError
from perflab.memory import cells


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
    exp = cells.cell_memory_experiment(cell_logger=False, keep=("model", "data"))
    assert os.environ["CUDA_MODULE_LOADING"] == "LAZY"
    assert exp.kept == ("model", "data") and exp.kwargs == {"cl_enable": False, "cl_compact": True}
    monkeypatch.delenv("CUDA_MODULE_LOADING")
    exp = cells.cell_memory_experiment()
    assert "CUDA_MODULE_LOADING" not in os.environ and exp.kept == ()


def test_finish_keeps_the_named_variables_and_pausing_without_a_logger_changes_nothing():
    exp = _Experiment()
    assert cells.finish_experiment(exp, keep=("x",)) == {"consumed": 0, "reclaimed": 0, "kept": ("x",)}
    ran = []
    with cells.pause_cell_logger(exp):
        ran.append(exp.cl)
    assert ran == [None] and exp.cl is None


def test_cell_memory_experiment_outside_a_kernel_says_so():
    with pytest.raises(UnsupportedError, match="notebook"):
        cells.cell_memory_experiment()
