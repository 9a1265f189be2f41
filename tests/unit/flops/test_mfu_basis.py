"""One honest MFU basis: the dtype that ran, a named and versioned ceiling, never above the peak."""

from types import SimpleNamespace

import pytest
import torch

from perflab.core import hardware
from perflab.flops import mfu

CPU = torch.device("cpu")


@pytest.fixture
def timed(monkeypatch, tmp_path):
    """measure_matmul that returns a chosen fastest time, with results in a fresh folder."""
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    box = {"min_s": 1e-3}
    import perflab.core.measure as M

    monkeypatch.setattr(M, "measure_matmul", lambda m, n, k, *a, **kw: SimpleNamespace(min_s=box["min_s"], n_reps=7))
    return box


def _est(tflops):
    return hardware.Peaks("cpu", {"fp32": tflops}, "estimate")


def test_a_ceiling_above_the_peak_is_questioned():
    assert hardware.ceiling_problem(0.1, "fp32", _est(0.2)) is None
    why = hardware.ceiling_problem(0.1698, "fp32", _est(0.1558))
    assert why and "109 % of the estimated peak" in why and "not stored" in why
    assert hardware.ceiling_problem(5.0, "bf16", _est(0.2)) is None  # no bf16 peak: nothing to check against


def test_the_first_ceiling_stays_the_basis_and_a_remeasure_is_a_named_new_version(timed, monkeypatch):
    monkeypatch.setattr(hardware, "ceiling_problem", lambda *a: None)
    shape = (64, 128, 32)
    b1 = mfu.mfu_basis(CPU, "fp32", shape)
    assert b1.kind == "measured ceiling" and b1.version == 1 and b1.shape == shape
    assert b1.tflops == pytest.approx(2 * 64 * 128 * 32 / 1e-3 / 1e12)
    assert "64×128×32 matmul" in b1.label() and "version 1" in b1.label() and b1.when
    timed["min_s"] = 0.5e-3  # another lesson's faster run does not replace it
    assert mfu.mfu_basis(CPU, "fp32", shape).version == 1
    b2 = mfu.mfu_basis(CPU, "fp32", shape, remeasure=True)
    assert b2.version == 2 and b2.replaced and "version 1" in b2.label()
    assert mfu.mfu_basis(CPU, "fp32", shape).tflops == pytest.approx(2 * b1.tflops)
    assert mfu.mfu_basis(CPU, "bf16", shape).version == 1  # each dtype has its own basis


def test_a_questioned_ceiling_is_used_named_and_not_stored(timed, monkeypatch):
    monkeypatch.setattr(hardware, "peaks_for", lambda info: _est(1e-9))
    b = mfu.mfu_basis(CPU, "fp32", (64, 64, 64))
    assert b.questioned and b.version is None and "not stored" in b.label()
    assert mfu.stored_ceilings(__import__("perflab.core.device", fromlist=["x"]).describe(CPU).slug) == {}


def test_a_utilization_above_100_percent_never_shows_without_its_reason():
    b = mfu.Basis(0.1, "measured ceiling", "fp32", "fastest of 5", "2026-01-01", (1, 2, 3), 1)
    assert mfu.utilization_text(0.347, b) == "34.7 %"
    over = mfu.utilization_text(1.04, b)
    assert over.startswith("104 % (above 100 %") and "fp32 ceiling" in over
    assert mfu.utilization_text(None) .startswith("unknown")


def test_a_mamf_search_above_the_peak_is_kept_as_questioned_not_stored(monkeypatch, tmp_path):
    from perflab.gemm import mamf

    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    monkeypatch.setattr(hardware, "peaks_for", lambda info: _est(1e-9))  # every real search is above this peak
    mamf.search([32, 64], [32, 64], [32, 64], dtype="fp32", device="cpu", rep_ms=2, warmup_ms=1, progress=False)
    assert mamf.measured_ceiling("cpu", "fp32") is None
    note = mamf.ceiling_note("cpu", "fp32")
    assert note.startswith("no measured ceiling stored") and "was not stored" in note and "estimated peak" in note
