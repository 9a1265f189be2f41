"""Tests of `perflab.course.reference`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perflab.core.errors import InputError
from perflab.course import reference
from perflab.course.reference import published


# ----------------------------------------------------------------------------- reference data
def test_reference_folder_from_the_environment_or_none_at_all(tmp_path, monkeypatch):
    from perflab.course import reference as ref

    monkeypatch.setenv("PERFLAB_DATA", "~/course-data")
    assert ref.data_root() == Path.home() / "course-data"
    monkeypatch.delenv("PERFLAB_DATA")
    monkeypatch.setattr("perflab.core.results.course_checkout", lambda: None)
    assert ref.data_root() is None
    with pytest.raises(InputError, match=r"^no data/ folder here \(perflab is not run from the course checkout\)"):
        ref.reference_path("waves", "cpu")


def test_a_reference_written_from_a_dataframe_reads_back_its_rows(tmp_path):
    import pandas as pd

    from perflab.course import reference as ref

    path = ref.record_reference("waves", pd.DataFrame([{"n": 64, "tflops": 0.5}, {"n": 128, "tflops": 0.75}]),
                                device="cpu", params={"dim": "n"}, root=tmp_path)
    assert path.parent == tmp_path and path.name.startswith("waves__cpu-")
    (back,) = ref.load_references("waves", tmp_path, gpu_only=False)
    assert back.rows == [{"n": 64, "tflops": 0.5}, {"n": 128, "tflops": 0.75}] and back.params == {"dim": "n"}


def test_a_reference_label_names_the_driver_and_cuda():
    from perflab.course.reference import Reference

    r = Reference("waves", {"device": "NVIDIA H100 80GB HBM3", "driver_version": "550.54", "cuda_version": "12.4",
                            "torch_version": "2.4.0", "date": "2025-01-10T10:00:00+00:00"}, {}, [])
    assert r.label == "measured by this course on NVIDIA H100 80GB HBM3 · driver 550.54 · CUDA 12.4 · torch 2.4.0 · 2025-01-10 (reference data)"


def test_an_unknown_reference_kind_is_refused_before_anything_is_measured(tmp_path):
    from perflab.course import reference as ref

    msg = r"^unknown reference kind 'bogus': use one of waves, heads, swiglu, mamf$"
    with pytest.raises(InputError, match=msg):
        ref.recording_sizes("bogus")
    with pytest.raises(InputError, match=msg):
        ref.record("bogus", "cpu", smoke=True, root=tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_reference_files_that_are_broken_or_of_another_kind_are_skipped(tmp_path):
    from perflab.course import reference as ref

    (tmp_path / "waves__a.json").write_text("{broken")
    (tmp_path / "waves__b.json").write_text(json.dumps({"kind": "mamf", "provenance": {}, "rows": []}))
    (tmp_path / "waves__c.json").write_text(json.dumps({"kind": "waves", "provenance": {"device": "cpu"},
                                                        "params": {}, "rows": [], "summary": {}}))
    assert ref.load_references("waves", tmp_path) == []  # a CPU run is not GPU reference data
    assert [r.path.name for r in ref.load_references("waves", tmp_path, gpu_only=False)] == ["waves__c.json"]
    assert ref.load_references("waves", tmp_path / "none") == []
    from perflab.core.results import jsonable

    assert jsonable(2) == 2.0 and jsonable(object).startswith("<class")


@pytest.mark.gpu
def test_recorders_write_gpu_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path / "results"))
    for kind in reference.KINDS:
        reference.record(kind, "cuda", smoke=True, root=tmp_path, progress=False)
    refs = {r.kind: r for k in reference.KINDS for r in reference.load_references(k, tmp_path)}
    assert set(refs) == set(reference.KINDS)
    for r in refs.values():
        assert r.on_gpu and r.provenance["sm_count"] and r.provenance["cuda_version"]


def test_record_and_load_roundtrip(tmp_path):
    p = reference.record_reference("waves", [{"n": 128, "tflops": 1.0, "median_s": 1e-3}], device="cpu",
                                   params={"dim": "n", "fixed": {"m": 8, "k": 8}, "sms": 2}, root=tmp_path)
    doc = json.loads(p.read_text())
    prov = doc["provenance"]
    for key in ("device", "driver_version", "cuda_version", "torch_version", "date", "kind"):
        assert key in prov
    assert prov["kind"] == "cpu" and prov["torch_version"]
    assert reference.load_references("waves", tmp_path) == []  # CPU files are not GPU references
    refs = reference.load_references("waves", tmp_path, gpu_only=False)
    assert len(refs) == 1 and refs[0].frame["n"].tolist() == [128]
    assert "reference data" in refs[0].label and prov["date"][:10] in refs[0].label


def test_unknown_kind_and_missing_note():
    with pytest.raises(InputError):
        reference.record_reference("bogus", [], device="cpu", root="/tmp")
    note = reference.missing_note("mamf")
    assert "No GPU reference data" in note and "perflab reference record --what mamf" in note


def test_published_records_have_sources():
    for key in ("nvidia_wave_example", "swiglu_h100_h4096", "swiglu_widths", "model_configs", "mamf"):
        rec = reference.published(key)
        assert rec.get("source") or all(r.get("source") for r in rec["rows"]), key
    with pytest.raises(KeyError):
        reference.published("nope")


def test_published_mamf_lookup():
    """S. Bekman, ML Engineering, MAMF comparison table (commit b9e29720): H100 SXM bf16 794.5 of 989 TFLOP/s."""
    row = reference.published_mamf("h100-sxm", "bf16")
    assert row["tflops"] == 794.5 and row["theory_tflops"] == 989 and "b9e29720" in row["source"]
    assert reference.published_mamf("a100-sxm-80gb", "bf16")["tflops"] == 271.2
    assert reference.published_mamf("l4", "bf16") is None and reference.published_mamf(None) is None
    from perflab.core.hardware import by_id

    # the table's theory column and perflab's datasheet peaks agree (dense bf16)
    assert by_id("h100-sxm").peak("bf16") == pytest.approx(row["theory_tflops"], rel=0.01)


@pytest.mark.parametrize("kind", reference.KINDS)
def test_recorders_run_in_smoke_mode_on_cpu(tmp_path, kind, monkeypatch):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path / "results"))
    p = reference.record(kind, "cpu", smoke=True, root=tmp_path, progress=False)
    doc = json.loads(p.read_text())
    assert doc["kind"] == kind and doc["rows"] and doc["provenance"]["device"]
    if kind == "waves":
        assert doc["summary"]["best_fit"]["tile"]
    if kind == "mamf":
        assert doc["summary"]["best"]["tflops"] > 0


def test_published_speedup_is_46_percent():
    rec = published("swiglu_h100_h4096")
    rows = {r["d_ff"]: r["tflops"] for r in rec["rows"]}
    assert rows[10944] / rows[10922] == pytest.approx(1.46, abs=0.01)  # "up to 46% faster"
