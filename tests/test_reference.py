"""Reference data: written with provenance, read back, and never shown as this machine's."""

import json

import pytest

from perflab.core.errors import InputError
from perflab.course import reference


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
