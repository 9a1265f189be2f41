"""Exact parameter counts, pinned to published figures and to the built PyTorch models.

Published counts: GPT-2 small 124,439,808 and medium 354,823,168 (the released checkpoints,
e.g. `sum(p.numel())` of Hugging Face's GPT2LMHeadModel, which ties the output layer);
Llama-2-7B 6,738,415,616, 13B 13,015,864,320, 70B 68,976,648,192 (the released checkpoints;
Touvron et al. 2023 round them to 7B/13B/70B); GPT-3 175B (Brown et al. 2020, Table 2.1: 175.0B).
"""

import pytest
import torch

from perflab.core.errors import InputError
from perflab.workload.models import (
    PRESETS,
    ModelConfig,
    build_model,
    non_embedding_params,
    param_count,
    preset,
)


@pytest.mark.parametrize("name,count", [
    ("gpt2-small", 124_439_808), ("gpt2-medium", 354_823_168), ("llama2-7b", 6_738_415_616),
    ("llama2-13b", 13_015_864_320), ("llama2-70b", 68_976_648_192),
])
def test_published_counts(name, count):
    assert param_count(preset(name)) == count


def test_gpt3_175b():
    assert param_count(preset("gpt3-175b")) / 1e9 == pytest.approx(175.0, rel=0.01)


@pytest.mark.parametrize("name", [n for n, c in PRESETS.items() if param_count(c) < 2e8])
def test_count_equals_built_model(name):
    cfg = preset(name)
    m = build_model(cfg)
    assert sum(p.numel() for p in m.parameters()) == param_count(cfg)


@pytest.mark.parametrize("changes", [dict(tied=False), dict(bias=False), dict(glu=True, ffn=200), dict(kv_heads=1),
                                     dict(positions="rotary", norm="rmsnorm"), dict(heads=8, head_dim=32)])
def test_count_equals_built_model_variants(changes):
    cfg = preset("tiny-gpt").with_(**changes)
    assert sum(p.numel() for p in build_model(cfg).parameters()) == param_count(cfg)


def test_forward_backward_and_checkpointing():
    cfg = preset("tiny-llama")
    m = build_model(cfg)
    x = torch.randint(0, cfg.vocab, (2, 16))
    y = m(x)
    assert y.shape == (2, 16, cfg.vocab)
    y.float().pow(2).mean().backward()
    g1 = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m.checkpointing = True
    m(x).float().pow(2).mean().backward()
    for a, b in zip(g1, [p.grad for p in m.parameters()]):
        torch.testing.assert_close(a, b)


def test_same_seed_same_weights_and_no_global_rng_change():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model(preset("tiny-gpt"), seed=7)
    after = torch.rand(1)
    b = build_model(preset("tiny-gpt"), seed=7)
    assert torch.equal(before, after)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_non_embedding():
    cfg = preset("gpt2-small")
    assert non_embedding_params(cfg) == param_count(cfg) - 50257 * 768 - 1024 * 768


@pytest.mark.parametrize("bad", [dict(hidden=130, heads=4), dict(heads=6, kv_heads=4), dict(layers=0), dict(positions="alibi")])
def test_bad_configs(bad):
    with pytest.raises(InputError):
        ModelConfig(**bad)


def test_unknown_preset():
    with pytest.raises(InputError, match="llama2-7b"):
        preset("llama-9")
