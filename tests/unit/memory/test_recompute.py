"""Tests of `perflab.memory.recompute`: gradient checkpointing's memory and time, measured."""

from __future__ import annotations

import pytest

from perflab.memory import recompute
from perflab.workload.models import preset


def test_checkpointing_cuts_activations_as_predicted():
    out = recompute.checkpointing_effect(preset("tiny-gpt"), batch=4, device="cpu", rep_ms=30, warmup_ms=10)
    assert out.stored.activation_bytes == out.stored.predicted_bytes
    assert out.checkpointed.activation_bytes == out.checkpointed.predicted_bytes
    assert out.saved_bytes == out.predicted_saved_bytes > 0
    # the work recomputed is counted (4/3 the FLOPs); what it costs in seconds is a measurement the
    # lesson shows, never asserted: a busy machine can push a measured ratio anywhere
    assert out.time_ratio > 0 and out.flop_ratio == pytest.approx(4 / 3)
    table = out.table()
    assert list(table[""]) == ["activations stored", "blocks recomputed", "saved / cost"]
    assert table["fwd+bwd (ms)"].iloc[2].endswith("(FLOPs × 1.33)")


def test_the_table_reads_the_sides_it_is_given():
    side = recompute.Side(3 * 2**20, 4 * 2**20, 3 * 2**20, 0.010, 0.009, 0.011, 0.002)
    half = recompute.Side(2**20, 2 * 2**20, 2**20, 0.013, 0.012, 0.014, 0.002)
    ck = recompute.CheckpointingEffect("m", 2, 16, "fp32", "cpu", side, half)
    assert ck.saved_bytes == 2 * 2**20 and ck.time_ratio == pytest.approx(1.3)
    assert list(ck.table()["measured"]) == ["3 MiB", "1 MiB", "2 MiB"]
    assert ck.table()["fwd+bwd (ms)"].iloc[2] == "× 1.30 (FLOPs × 1.33)"


@pytest.mark.gpu
def test_checkpointing_on_gpu():
    out = recompute.checkpointing_effect(preset("small-gpt"), batch=8, device="cuda", rep_ms=100)
    assert out.saved_bytes == pytest.approx(out.predicted_saved_bytes, rel=0.05)


def _effect(quiet_a, quiet_b):
    side = recompute.Side(3 * 2**20, 4 * 2**20, 3 * 2**20, 0.010, 0.009, 0.011, 0.002, quiet_a)
    half = recompute.Side(2**20, 2 * 2**20, 2**20, 0.013, 0.012, 0.014, 0.002, quiet_b)
    return recompute.CheckpointingEffect("m", 2, 16, "fp32", "cpu", side, half)


def test_a_ratio_timed_on_a_busy_machine_judges_no_prediction():
    from perflab.core.quietness import Quietness

    quiet = Quietness("quiet", 0.0, 1.0, 2, 0.0, 2, "")
    busy = Quietness("disturbed", 0.4, 1.0, 2, 0.8, 2, "other programs used 40 % of 2 cores")
    ok = _effect(quiet, quiet)
    assert ok.headline() == pytest.approx(1.3)
    assert ok.verdict() == "forward + backward took 1.30× as long with every block recomputed; its FLOPs grow 1.33× (machine quiet)"
    bad = _effect(quiet, busy)
    assert bad.quietness.disturbed and bad.headline() is None
    assert bad.verdict().startswith("inconclusive: the machine was busy (other programs used 40 % of 2 cores")


def test_the_memory_saved_in_words():
    from perflab.core.quietness import UNKNOWN

    ck = _effect(UNKNOWN, UNKNOWN)
    assert ck.memory_text() == ("recomputing saved 2 MiB of activations (2,097,152 bytes); predicted 2,097,152 bytes: "
                                "equal to the byte")
    off = recompute.CheckpointingEffect("m", 2, 16, "fp32", "cuda", ck.stored,
                                        recompute.Side(2**20 + 512, 2 * 2**20, 2**20, 0.013, 0.012, 0.014, 0.002))
    assert off.memory_text().endswith("-512 bytes apart (-0.02%)")
