"""Tests of `perflab.plan.scale`: a model of identical blocks planned from two depths equals its whole trace."""

from __future__ import annotations

import pytest

from perflab.plan import scale
from perflab.plan.run import plan


def six_blocks():
    """perflab's tiny GPT with 6 identical blocks (scale traces 2 and 3 of them)."""
    from dataclasses import replace

    from perflab.audit.target import target_from
    from perflab.workload.models import build_model, preset
    from perflab.workload.train import make_batches

    cfg = replace(preset("tiny-gpt"), layers=6)
    return target_from({"model": build_model(cfg), "batches": make_batches(cfg, 8, 128)}, "tiny-gpt, 6 blocks, 8 × 128 tokens")


def test_two_depths_extrapolated_give_the_whole_models_plan():
    assert scale.blocks_of(six_blocks) == (6, True)
    whole = plan(six_blocks, gpus=2, fsdp=True, dtype="fp32", suggest=False, whole=True)
    part = plan(six_blocks, gpus=2, fsdp=True, dtype="fp32", suggest=False)
    assert any("extrapolated" in n for n in part.notes) and not any("extrapolated" in n for n in whole.notes)
    assert part.peak_bytes == pytest.approx(whole.peak_bytes, rel=0.01)
    for ph in ("forward", "backward"):
        assert part.flops[ph] == pytest.approx(whole.flops[ph], rel=1e-6)
    assert part.step.comm_s == pytest.approx(whole.step.comm_s, rel=0.02)
    # each trace is remembered: planning again traces nothing
    n = scale.cached()
    plan(six_blocks, gpus=2, fsdp=True, dtype="fp32", suggest=False)
    assert scale.cached() == n
