"""Helpers the tests of this folder share: a timed matmul and a quietness watch, both made up."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

from perflab.core.hardware import Peaks


def timed_matmul(monkeypatch, tmp_path) -> dict:
    """`perflab.core.measure.measure_matmul` returns the fastest time box["min_s"], with results in a fresh
    folder; box["q"] is the quietness the watch of `watch_of(box)` reports."""
    import perflab.core.measure as M

    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    box = {"min_s": 1e-3, "q": {"verdict": "quiet", "share": 0.02, "cause": "machine quiet"}}
    monkeypatch.setattr(M, "measure_matmul", lambda m, n, k, *a, **kw: SimpleNamespace(min_s=box["min_s"], n_reps=7))
    return box


def watch_of(box):
    """A quietness watch that reports box["q"] (no /proc read)."""

    @contextlib.contextmanager
    def watch(device):
        yield SimpleNamespace(result=box["q"])

    return watch


def estimated(tflops: float | None = None) -> Peaks:
    """A CPU's peaks: fp32 estimated at `tflops` (None: no peak, so no ceiling is above it)."""
    return Peaks("cpu", {} if tflops is None else {"fp32": tflops}, "estimate" if tflops else "unknown")
