"""Small targets for the plan's tests: perflab's tiny GPT with lesson 12's batch (2 × 32 tokens)."""

from __future__ import annotations

import pytest

# the tests that read conftest.py's `published_8b` plans run on one xdist worker, which plans them once
PUBLISHED_GROUP = pytest.mark.xdist_group("plan-published-8b")


def tiny_gpt(batch: int = 2, seq: int = 32, preset: str = "tiny-gpt"):
    from perflab.audit.target import target_from
    from perflab.workload.models import build_model
    from perflab.workload.models import preset as get_preset
    from perflab.workload.train import make_batches

    cfg = get_preset(preset)
    return target_from({"model": build_model(cfg), "batches": make_batches(cfg, batch, seq)}, f"{preset} b{batch} s{seq}")
