"""Tests of `perflab.flops.basis`: what an MFU is divided by, stored under the one ceiling rule."""

from __future__ import annotations

import pytest
import torch

from perflab.core import ceiling
from perflab.core.device import describe
from perflab.core.hardware import Peaks
from perflab.flops import basis

from .helpers import estimated, timed_matmul, watch_of

CPU = torch.device("cpu")


@pytest.fixture
def timed(monkeypatch, tmp_path):
    return timed_matmul(monkeypatch, tmp_path)


def _stored(dtype="fp32", shape=(64, 64, 64)):
    key = ceiling.slot_key("basis", dtype, shape, torch.__version__)
    return ceiling.read(ceiling.store_path(describe(CPU).slug)).slot(key).stored


def test_a_questioned_ceiling_is_used_named_and_not_stored(timed):
    b = basis.mfu_basis(CPU, "fp32", (64, 64, 64), watch=watch_of(timed), peaks=estimated(1e-9))
    assert b.questioned and b.version is None and "not stored" in b.label() and "estimated peak" in b.label()
    assert _stored() == []


def test_a_ceiling_measured_on_a_busy_machine_is_used_named_and_not_stored(timed):
    timed["q"] = {"verdict": "disturbed", "share": 0.48, "cause": "other programs used 48 % of 2 cores"}
    seen = []

    def counting(device):
        seen.append(device)
        return watch_of(timed)(device)

    b = basis.mfu_basis(CPU, "fp32", (64, 64, 64), watch=counting, peaks=estimated())
    assert len(seen) == basis.CEILING_ATTEMPTS  # measured again while the machine stayed busy
    assert b.version is None and not b.stored and b.quietness is not None and b.quietness.disturbed
    assert "not stored: measured while the machine was busy (other programs used 48 % of 2 cores)" in b.label()
    assert _stored() == []
    timed["q"] = None  # quietness that cannot be read is not quiet either
    assert not basis.mfu_basis(CPU, "fp32", (64, 64, 64), watch=watch_of(timed), peaks=estimated()).stored


def test_a_remeasure_never_replaces_a_quieter_ceiling(timed):
    w = watch_of(timed)
    b1 = basis.mfu_basis(CPU, "fp32", (64, 64, 64), watch=w, peaks=estimated())
    timed["q"] = {"verdict": "quiet", "share": 0.08, "cause": "machine quiet"}  # quiet, but less so
    timed["min_s"] = 0.25e-3
    b2 = basis.mfu_basis(CPU, "fp32", (64, 64, 64), remeasure=True, watch=w, peaks=estimated())
    assert b2.version == 1 and b2.tflops == b1.tflops and "quieter machine" in (b2.questioned or "")
    assert "a re-measure gave" in (b2.questioned or "")
    timed["q"] = {"verdict": "quiet", "share": 0.0, "cause": "machine quiet"}
    assert basis.mfu_basis(CPU, "fp32", (64, 64, 64), remeasure=True, watch=w, peaks=estimated()).version == 2
    assert [r.version for r in _stored()] == [1, 2]


def test_a_spec_peak_is_the_basis_where_the_table_has_one(timed):
    h100 = Peaks("NVIDIA H100", {"bf16": 989.4}, "spec sheet")
    b = basis.mfu_basis(CPU, "bf16", (8, 8, 8), watch=watch_of(timed), peaks=h100)
    assert (b.kind, b.tflops, b.stored) == ("spec peak", 989.4, True) and "bf16 spec peak 989.4 TFLOP/s" in b.label()
    assert basis.mfu_basis(CPU, "fp8", (8, 8, 8), watch=watch_of(timed), peaks=h100).kind == "measured ceiling"
    assert basis.measured_basis(CPU, "bf16", (8, 8, 8), watch=watch_of(timed), peaks=h100).kind == "measured ceiling"


def test_every_caller_gets_the_same_cpu_ceiling_shape():
    assert basis.ceiling_shape(CPU) == basis.ceiling_shape("cpu") == basis.CEILING_SHAPE_CPU
    assert basis.ceiling_shape(torch.device("cuda")) == basis.CEILING_SHAPE_GPU


def test_a_basis_as_json_carries_its_label_and_its_quietness():
    from perflab.core.quietness import Quietness

    q = Quietness("quiet", 0.01, 1.0, 2, 0.02, 2, "")
    b = basis.Basis(0.1, "measured ceiling", "fp32", "fastest of 5", "2026-01-01", (1, 2, 3), 1, quietness=q)
    j = b.as_dict()
    assert j["label"] == b.label() and j["shape"] == [1, 2, 3] and j["quietness"]["verdict"] == "quiet"
    assert list(j)[:3] == ["tflops", "kind", "dtype"]


# ---------------------------------------------------------------- lesson 13's ceiling


def test_the_ceiling_is_measured_when_no_search_is_stored(monkeypatch):
    from perflab.core import measure

    sizes = []

    def measure_matmul(m, n, k, dtype, device, **kw):
        sizes.append((m, n, k, dtype, str(device)))
        return type("R", (), {"tflops": 1.25})()

    monkeypatch.setattr(measure, "measure_matmul", measure_matmul)
    cache: dict = {}
    c = basis.matmul_ceiling("cpu", "fp32", size=64, searched=lambda dev, dt: None, cache=cache)
    assert (c.tflops, c.source, c.size) == (1.25, "matmul", 64)
    assert c.label == "measured matmul ceiling (largest square matmul measured here: 64³ fp32)"
    assert basis.matmul_ceiling("cpu", "fp32", size=64, searched=lambda dev, dt: None, cache=cache) is c
    assert sizes == [(64, 64, 64, "fp32", "cpu")]


def test_the_ceiling_prefers_a_stored_search():
    c = basis.matmul_ceiling("cpu", "fp32", size=256, searched=lambda dev, dt: 1.234, cache={})
    assert c.tflops == 1.234 and c.source == "mamf"


def test_ceiling_measured_and_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))  # no MAMF search recorded here by another test
    a = basis.matmul_ceiling("cpu", "fp32", size=256)
    b = basis.matmul_ceiling("cpu", "fp32", size=256)
    assert a is b and a.tflops > 0 and "256³" in a.label and a.source == "matmul"
