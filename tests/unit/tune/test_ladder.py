"""The checkpoint rung's FLOP cost, computed from perflab's exact count: every block's forward again,
the LM head not; for GPT-2 small at 1024 tokens about +17 % per step, not "a third"."""

import pytest

from perflab.flops.transformer import exact_flops, layer_forward
from perflab.tune.ladder import checkpoint_flop_overhead
from perflab.workload.models import preset


def test_gpt2_small_pays_about_17_percent_per_step_for_full_checkpointing():
    r = checkpoint_flop_overhead("gpt2-small")
    assert r["seq"] == 1024 and r["overhead"] == pytest.approx(0.1729, abs=5e-4)
    assert "logits" in r["not_recomputed"] and "mlp_down" in r["not_recomputed"]  # torch stops early
    # the extra is exactly the blocks' forward products up to the last saved tensor
    cfg = preset("gpt2-small")
    layer = layer_forward(cfg, 1, 1024)
    assert r["extra_flops"] == cfg.layers * (sum(layer.values()) - layer["mlp_down"])
    assert r["step_flops"] == exact_flops(cfg, 1, 1024).hardware
    whole = checkpoint_flop_overhead(cfg, early_stop=False)
    assert whole["extra_flops"] == cfg.layers * sum(layer.values()) and r["overhead"] < whole["overhead"] < 1 / 3
    assert r["of_forward"] < 1  # less than one more forward: the LM head is not recomputed
