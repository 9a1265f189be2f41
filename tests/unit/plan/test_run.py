"""Tests of `perflab.plan.run`: the plan's verdicts, its JSON, and its memory against lesson 12's ranks."""

from __future__ import annotations

import json
from functools import partial

import pytest

from perflab.core.errors import InputError
from perflab.plan.run import plan

from .factories import tiny_gpt

ACT_HEAVY = partial(tiny_gpt, 8, 128)  # activations are most of this step's memory


@pytest.fixture(scope="module")
def plans():
    return {"none": plan(ACT_HEAVY, gpus=2, fsdp=True, dtype="fp32", suggest=False),
            "full": plan(ACT_HEAVY, gpus=2, fsdp=True, dtype="fp32", ac="full", suggest=False)}


def test_full_recompute_trades_activations_for_time(plans):
    none, full = plans["none"], plans["full"]
    assert full.parts["activations"] < none.parts["activations"] / 2
    assert full.flops["recompute"] > 0 == none.flops["recompute"]
    assert full.step.compute_s > none.step.compute_s
    # the model's FLOPs are the same: MFU counts no recompute
    assert full.flops["forward"] == none.flops["forward"]
    assert full.mfu is not None and none.mfu is not None and full.mfu < none.mfu <= 1
    # lesson 02's definition, per GPU, at the GPU's dense fp32 peak, divided where every MFU is
    want = (none.flops["forward"] + none.flops["backward"]) / (none.step.step_s * none.cluster.peak("fp32") * 1e12)
    assert none.mfu == pytest.approx(want, rel=1e-12) and none.to_json()["mfu"] == none.mfu


def test_auto_recompute_fits_a_budget_between_none_and_full_at_less_time_than_full(plans):
    none, full = plans["none"], plans["full"]
    budget = (0.3 * none.peak_bytes + 0.7 * full.peak_bytes) / 1e9
    p = plan(ACT_HEAVY, gpus=2, fsdp=True, dtype="fp32", ac="auto", budget_gb=budget, suggest=False)
    assert p.fits and p.peak_bytes <= budget * 1e9 < none.peak_bytes
    assert p.recompute and all(r["op"] and r["bytes_per_block"] > 0 for r in p.recompute)
    assert p.step.compute_s <= full.step.compute_s and p.extra_recompute_s > 0
    # a budget the whole model fits: nothing is recomputed
    q = plan(ACT_HEAVY, gpus=2, fsdp=True, dtype="fp32", ac="auto", suggest=False)
    assert q.fits and not q.recompute and q.flops["recompute"] == 0


def test_a_plan_that_does_not_fit_says_what_to_change_each_change_planned(plans):
    budget = plans["full"].peak_bytes * 1.05 / 1e9
    p = plan(ACT_HEAVY, gpus=2, fsdp=True, dtype="fp32", budget_gb=budget)
    assert not p.fits
    full = next(s for s in p.suggestions if s.startswith("--ac full"))
    assert "(fits)" in full
    d = json.loads(json.dumps(p.to_json()))
    assert d["fits"] is False and d["suggestions"] == p.suggestions
    assert sum(d["memory_bytes"].values()) == d["peak_bytes"]
    assert d["comm_hidden_s"] + d["comm_exposed_s"] == pytest.approx(d["comm_s"])
    text = p.text()
    assert "fits" in text and "None" not in text and "--ac full" in text


def test_bad_input_is_one_line():
    with pytest.raises(InputError, match="--budget must be a positive number of GB"):
        plan(ACT_HEAVY, budget_gb=-1)
    with pytest.raises(InputError, match="--budget 500 GB is more than"):
        plan(ACT_HEAVY, budget_gb=500)
    with pytest.raises(InputError, match="--headroom must be a fraction"):
        plan(ACT_HEAVY, headroom=1.5)


@pytest.mark.slow
def test_the_plans_memory_matches_lesson_12s_ranks_within_10_percent():
    """FSDP2 and tensor parallelism on 2 gloo ranks (lesson 12's worker, real tensors, torch's tracker on
    every rank) against the plan of the same step on a fake group of 2: the FSDP peak, and the
    tensor-parallel blocks' parameter shard and the tensor-parallel step's peak."""
    import torch

    from perflab.plan.step import find_blocks
    from perflab.shard.run import shard_many

    measured = shard_many(["fsdp", "tp"], 2)
    fsdp = plan(tiny_gpt, gpus=2, fsdp=True, dtype="fp32", suggest=False)
    for row in measured["fsdp"].rows:
        assert fsdp.peak_bytes == pytest.approx(row["peak_bytes"], rel=0.10), (fsdp.parts, row)
        assert fsdp.parts["optimizer state"] == pytest.approx(row["optim_bytes"], rel=0.10)
    tp = plan(tiny_gpt, gpus=2, tp=2, dtype="fp32", suggest=False)
    with torch.device("meta"):
        model = tiny_gpt().model
    found = find_blocks(model)
    assert found is not None
    outside = sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in found[1].parameters())
    blocks_planned = tp.parts["parameters"] - 4 * outside  # fp32; the embeddings and the last norm are replicated
    for row in measured["tp"].rows:
        assert blocks_planned == pytest.approx(row["param_bytes"], rel=0.10)
        # the whole step's peak on each rank (torch's MemTracker on the real tensors of the same step)
        assert row["peak_bytes"] and tp.peak_bytes == pytest.approx(row["peak_bytes"], rel=0.10), (tp.parts, row)


@pytest.mark.slow
def test_auto_recomputes_whole_blocks_when_no_selection_of_operators_fits():
    """small-llama at 8 × 256 tokens: a selective policy that lists every operator still keeps more than
    checkpointing whole blocks, and a budget between the two is met by whole blocks."""
    from perflab.plan.run import preset_target

    build = preset_target("small-llama", 8, 256)
    none = plan(build, gpus=8, fsdp=True, suggest=False)
    full = plan(build, gpus=8, fsdp=True, ac="full", suggest=False)
    budget = (0.4 * none.peak_bytes + 0.6 * full.peak_bytes) / 1e9
    p = plan(build, gpus=8, fsdp=True, ac="auto", budget_gb=budget, suggest=False)
    assert p.fits and p.peak_bytes == full.peak_bytes and "full recompute" in p.recompute[0]["op"]
    assert p.extra_recompute_s > 0 and any("recomputing whole blocks does" in n for n in p.notes)
