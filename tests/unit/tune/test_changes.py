"""Tests of `perflab.tune.changes`: each rung as a change to the step's configuration."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from perflab.core.errors import InputError
from perflab.tune import changes, ladder
from perflab.tune.config import StepConfig

from .helpers import CPU, SMOKE


def test_apply_rung_when_a_rung_does_not_apply():
    sc = StepConfig(micro_batch=2)
    even = replace(SMOKE, cfg=replace(SMOKE.cfg, vocab=512))
    ch = changes.apply_rung("vocab64", sc, even, CPU, [])
    assert not ch.applicable and ch.note == "the vocabulary (512) is already a multiple of 64"
    ch = changes.apply_rung("compile", sc, SMOKE, CPU, [])
    assert ch.applicable and ch.config.compiled and not sc.compiled
    tight = replace(SMOKE, memory_budget_bytes=1)  # nothing fits one byte
    assert changes.largest_fitting(tight, sc, CPU, False)[0] == 2
    ch = changes.apply_rung("batch", sc, tight, CPU, [])
    assert not ch.applicable and ch.note.startswith("no larger micro-batch fits the budget of")
    ch = changes.apply_rung("checkpoint", sc, tight, CPU, [])
    assert not ch.applicable and ch.note.startswith("even with checkpointing no larger micro-batch fits")
    with pytest.raises(InputError, match="unknown rung 'flash'"):
        changes.apply_rung("flash", sc, SMOKE, CPU, [])


def test_the_adamw_rung_falls_back_to_foreach_without_a_fused_kernel():
    # a device with no fused AdamW kernel (the meta device computes nothing)
    assert changes.apply_rung("adamw", StepConfig(), SMOKE, torch.device("meta"), []).config.optimizer == "foreach"


def test_a_preset_without_a_budget_needs_a_gpu():
    with pytest.raises(InputError, match="no memory budget for a cpu device"):
        changes.memory_budget(replace(SMOKE, memory_budget_bytes=None), CPU)


def test_batch_and_checkpoint_rungs_follow_the_memory_estimator():
    tp = ladder.preset("smoke")  # budget 3 MiB: micro-batch 4 fits, 8 needs checkpointing
    sc = StepConfig(micro_batch=2)
    ch = changes.apply_rung("batch", sc, tp, CPU, [])
    assert ch.applicable and ch.config.micro_batch == 4 and ch.extra["predicted_peak_bytes"] <= tp.memory_budget_bytes
    ck = changes.apply_rung("checkpoint", ch.config, tp, CPU, [])
    assert ck.applicable and ck.config.checkpointing and ck.config.micro_batch == 8
    early = changes.apply_rung("checkpoint", sc, tp, CPU, [])  # the batch rung has not raised it yet
    assert not early.applicable and "does not need it" in early.note
    roomy = ladder.TunePreset("roomy", tp.cfg, 8, 2, 2, 1, 0.0, 2**30, 1.1)
    full = changes.apply_rung("batch", sc, roomy, CPU, [])
    assert full.config.micro_batch == 8
    assert not changes.apply_rung("checkpoint", full.config, roomy, CPU, []).applicable
