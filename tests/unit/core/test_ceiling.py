"""Tests of `perflab.core.ceiling`: one store of measured ceilings, one rule for what it keeps."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from perflab.core import ceiling
from perflab.core.ceiling import CeilingRecord
from perflab.core.hardware import Peaks, by_id, peaks_for
from perflab.core.quietness import UNKNOWN, Quietness

QUIET = Quietness("quiet", 0.02, 1.0, 2, 0.04, 2, "")
QUIETER = Quietness("quiet", 0.0, 1.0, 2, 0.0, 2, "")
BUSY = Quietness("disturbed", 0.48, 1.0, 2, 0.96, 2, "other programs used 48 % of 2 cores")
CPU = Peaks("cpu", {"fp32": 0.2}, "estimate")  # an estimated peak of 200 GFLOP/s


def _rec(tflops=0.1, q=QUIET, kind="basis", **kw) -> CeilingRecord:
    return CeilingRecord(tflops, "fp32", (64, 128, 32), "fastest call" if kind == "basis" else "mean", "a matmul",
                         "2026-11-26 08:00", q, "2.9.0", "test cpu", kind=kind, **kw)


# ---------------------------------------------------------------- the rule, on injected records


def test_a_quiet_confirmed_ceiling_under_the_peak_is_admitted():
    assert ceiling.admit(_rec(), None, CPU) is None
    assert ceiling.admit(_rec(kind="search", confirmed=True), None, CPU) is None


def test_a_ceiling_above_the_peak_is_refused_whatever_else_is_true():
    why = ceiling.admit(_rec(0.25, QUIETER, kind="search", confirmed=True), None, CPU)
    assert why and "125 % of the estimated peak" in why and "cannot exceed the peak" in why
    h100 = peaks_for(__import__("perflab.core.device", fromlist=["x"]).DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0))
    assert "spec-sheet peak" in (ceiling.admit(replace(_rec(2000.0), dtype="bf16"), None, h100) or "")
    no_peak = Peaks("cpu", {}, "unknown")  # nothing to check against: the other rules decide
    assert ceiling.admit(_rec(1e6), None, no_peak) is None


def test_a_best_that_did_not_repeat_is_refused_and_one_never_asked_is_not():
    assert ceiling.admit(_rec(kind="search", confirmed=False), None, CPU) == \
        "the best shape's figure did not repeat when measured again"
    assert ceiling.admit(_rec(confirmed=None), None, CPU) is None


def test_a_busy_or_unread_machine_is_refused_and_says_why():
    assert ceiling.admit(_rec(q=BUSY), None, CPU) == ("measured while the machine was busy (other programs used 48 % "
                                                     "of 2 cores), so every MFU against it is suspect")
    assert ceiling.admit(_rec(q=BUSY, kind="search", confirmed=True), None, CPU) == \
        "measured while the machine was busy (other programs used 48 % of 2 cores)"
    assert ceiling.admit(_rec(q=UNKNOWN), None, CPU) == "the machine's quietness could not be read"


def test_a_stored_version_is_replaced_only_by_one_as_quiet_or_quieter():
    stored = _rec(q=QUIETER, version=1)
    why = ceiling.admit(_rec(0.15, QUIET), stored, CPU)
    assert why == "the stored version 1 (0.1 TFLOP/s, 2026-11-26 08:00) was measured on a quieter machine"
    assert ceiling.admit(_rec(0.15, QUIETER), stored, CPU) is None  # equally quiet: the newer wins
    assert ceiling.admit(_rec(0.15, QUIETER), _rec(q=QUIET, version=1), CPU) is None


# ---------------------------------------------------------------- the store


def test_offers_are_versioned_in_their_slot_and_the_refused_one_is_kept_as_the_last(tmp_path):
    path = tmp_path / "ceilings.json"
    first = ceiling.offer(_rec(q=QUIETER), CPU, path)
    assert first.stored and first.version == 1 and first.questioned is None
    louder = ceiling.offer(_rec(0.15, QUIET), CPU, path)
    assert not louder.stored and "quieter machine" in (louder.questioned or "")
    second = ceiling.offer(_rec(0.12, QUIETER), CPU, path)
    assert second.version == 2
    slot = ceiling.read(path).slot(first.slot)
    assert [r.tflops for r in slot.stored] == [0.1, 0.12] and slot.current == second and slot.previous == first
    assert slot.last == second
    # another dtype, shape, torch or kind is another slot
    search = ceiling.offer(_rec(0.05, QUIETER, kind="search", confirmed=True), CPU, path)
    assert search.version == 1 and search.slot == "fp32 search" != first.slot == "fp32 64x128x32 torch 2.9.0"
    doc = json.loads(path.read_text())
    assert doc["format"] == 1 and set(doc["slots"]) == {"fp32 64x128x32 torch 2.9.0", "fp32 search"}


def test_a_record_reads_back_as_it_was_written(tmp_path):
    rec = _rec(kind="search", confirmed=True, version=3, details={"mean": 0.1, "ranges": {"m": [32, 64, 2]}})
    assert CeilingRecord.from_json(json.loads(json.dumps(rec.to_json()))) == rec
    assert CeilingRecord.from_json({"tflops": "x"}) is None
    (tmp_path / "ceilings.json").write_text("not json")
    assert ceiling.read(tmp_path / "ceilings.json").slots == {}


def test_a_store_that_cannot_be_written_leaves_the_ceiling_for_this_run(tmp_path):
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    kept = ceiling.offer(_rec(q=QUIETER), CPU, blocked / "ceilings.json")
    assert kept.stored and kept.version == 1 and blocked.is_file()


def test_files_kept_under_earlier_rules_are_not_read_as_stored_ceilings(tmp_path):
    """Only `admit` stores a ceiling: a file an earlier perflab kept beside the store is not read into it."""
    (tmp_path / "mamf_ceiling.json").write_text(json.dumps({"fp32": {"best": {"tflops": 0.05, "m": 64, "n": 64, "k": 64}}}))
    assert ceiling.read(tmp_path / "ceilings.json").slots == {}
    kept = ceiling.offer(_rec(q=QUIETER), CPU, tmp_path / "ceilings.json")
    assert kept.stored and kept.version == 1


def test_slot_keys_name_their_kind():
    assert ceiling.slot_key("search", "bf16") == "bf16 search"
    assert ceiling.slot_key("basis", "bf16", (8, 8, 8), "2.9.0") == "bf16 8x8x8 torch 2.9.0"
    with pytest.raises(ValueError, match="unknown ceiling kind"):
        ceiling.slot_key("best", "bf16")
    with pytest.raises(ValueError, match="needs the shape"):
        ceiling.slot_key("basis", "bf16")


def test_the_store_lives_in_the_devices_results_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    p = ceiling.store_path("cpu-test", host="box")
    assert p == tmp_path / "box" / "cpu-test" / "ceilings.json"
    assert by_id("h100-sxm").peak("bf16")  # the peak the rule checks against comes from the one look-up
