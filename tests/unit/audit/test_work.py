"""What a step computes: parameters (shared experts active for every token, routed ones k of E), 6N·T and
the terms of its gap to the counted FLOPs, and float64's cost, on outside models and counted steps."""

import pytest
import torch
from torch import nn

from perflab.audit.work import count_params, count_work, float64_cause, six_n_t
from perflab.flops.counter import count_flops

from . import factories as F


def _hf(kind, overrides):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(transformers.CONFIG_MAPPING[kind](**overrides))


@pytest.mark.parametrize("kind, overrides, shared_name", [("deepseek_v3", F.DEEPSEEK_V3, "shared_experts"),
                                                         ("qwen2_moe", F.QWEN2_MOE, "shared_expert")])
def test_shared_experts_are_active_for_every_token(kind, overrides, shared_name):
    """Active = routed experts × k/E + everything else, shared experts included whole."""
    model = _hf(kind, overrides)
    e = overrides.get("n_routed_experts") or overrides["num_experts"]
    k = overrides["num_experts_per_tok"]
    mods = dict(model.named_modules())
    routed = sum(sum(p.numel() for p in m.parameters()) for n, m in mods.items() if n.endswith("mlp.experts"))
    shared = sum(sum(p.numel() for p in m.parameters()) for n, m in mods.items() if n.endswith(f"mlp.{shared_name}"))
    assert routed > 0 and shared > 0
    total, active, how = count_params(model, model.config)
    assert total == sum(p.numel() for p in model.parameters())
    assert active == total - routed * (e - k) // e
    assert f"top-{k} of {e}" in how


class Tiny(nn.Module):
    """An embedding table (in N, but a lookup does no multiply-add) and a head: 6N·T by hand."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.emb = nn.Embedding(50, 16, dtype=dtype)
        self.head = nn.Linear(16, 50, bias=False, dtype=dtype)

    def forward(self, ids):
        return self.head(self.emb(ids))


def _counted(model, ids):
    def step(b):
        loss = model(b).float().logsumexp(-1).mean()
        loss.backward()
        return loss

    return count_flops(step, ids)


def test_the_gap_terms_add_up_to_counted_minus_six_n():
    model, ids = Tiny(), torch.randint(0, 50, (2, 8))
    fc = _counted(model, ids)
    w = count_work(fc, model, None, ids.numel())
    n = 50 * 16 + 16 * 50
    assert (w.params_total, w.params_active) == (n, n) and w.six_n == 6 * n * 16
    assert six_n_t(model, n, 16)[1] == -6 * 50 * 16 * 16  # the table's share of 6N·T
    assert [g.what.split(" (")[0] for g in w.gap] == ["attention", "embedding tables", "the rest"]
    assert sum(g.flops for g in w.gap) == w.flops_per_step - w.six_n
    # the head's product forward and its weight gradient (the embedding's output needs a gradient too)
    assert w.flops_per_step == 3 * 2 * 16 * 16 * 50 and w.flops_by_dtype == {"fp32": w.hardware_flops_per_step}


def test_without_tokens_there_is_no_six_n_and_no_gap():
    model, ids = Tiny(), torch.randint(0, 50, (2, 8))
    w = count_work(_counted(model, ids), model, None, None)
    assert w.six_n is None and w.gap == [] and w.six_n_how == ""


def test_a_float32_step_names_no_float64_cause():
    from perflab.flops.mfu import Basis, utilization

    model, ids = Tiny(), torch.randint(0, 50, (2, 8))
    fc = _counted(model, ids)
    u = utilization(1.0, fc.model_by_dtype(), {"fp32": Basis(tflops=1.0, kind="spec peak", dtype="fp32", what="given")})
    assert float64_cause(fc, u, torch.device("cpu")) == []
