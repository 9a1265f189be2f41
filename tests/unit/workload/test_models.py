"""Tests of `perflab.workload.models`."""

import math

import pytest
import torch

from perflab.core.denormals import (
    count_denormals,
)
from perflab.core.errors import InputError
from perflab.flops.counting import count_flops, torch_flop_count
from perflab.flops.mfu import mfu, printed
from perflab.flops.step import measure_step
from perflab.flops.transformer import (
    exact_flops,
    flops_per_token,
)
from perflab.memory import probe
from perflab.memory.estimate import CPU_RNG_STATE_BYTES, activation_total, model_activation_bytes
from perflab.workload.models import (
    INIT_STD,
    PRESETS,
    ModelConfig,
    build_model,
    non_embedding_params,
    param_breakdown,
    param_count,
    preset,
)
from perflab.workload.train import (
    StepRunner,
    make_batches,
    model_loss,
)


def _step(model, x):
    def fn():
        model(x).float().pow(2).mean().backward()
    return fn


CASES = [("tiny-gpt", {}), ("tiny-llama", {}), ("tiny-gpt", {"kv_heads": 1}), ("tiny-gpt", {"tied": False}),
         ("tiny-gpt", {"glu": True, "ffn": 200}), ("tiny-llama", {"kv_heads": 4, "bias": True})]


BASE = dict(layers=2, hidden=64, heads=4, vocab=512, seq_len=64)


VARIANTS = {
    "gpt": ModelConfig("gpt", **BASE),
    "gpt-gqa-nobias": ModelConfig("gpt-gqa", **BASE, kv_heads=2, bias=False),
    "llama": ModelConfig("llama", **BASE, kv_heads=2, glu=True, tied=False, bias=False, positions="rotary", norm="rmsnorm"),
    "llama-mha": ModelConfig("llama-mha", **BASE, glu=True, tied=False, bias=False, positions="rotary", norm="rmsnorm"),
    "rotary-layernorm": ModelConfig("rot", **BASE, positions="rotary"),
}


def _matmul_weights(cfg: ModelConfig) -> int:
    h, a, kv, d, f = cfg.hidden, cfg.heads, cfg.n_kv, cfg.d_head, cfg.d_ff
    per_layer = h * a * d + 2 * h * kv * d + a * d * h + (3 if cfg.glu else 2) * h * f
    return cfg.layers * per_layer + cfg.vocab * h  # + the output matrix (tied: the embedding)


# presets of at most 200M parameters build and step in seconds here (gpt2-small: 124M)
SMALL = [name for name, cfg in PRESETS.items() if param_count(cfg) <= 200e6]


@pytest.mark.parametrize("kw, words", [
    (dict(norm="batchnorm"), ("norm", "'layernorm' or 'rmsnorm'", "batchnorm")),
    (dict(positions="rotary", hidden=12, heads=4), ("rotary", "even head size", "3")),
])
def test_config_refuses_what_the_model_cannot_build(kw, words):
    with pytest.raises(InputError) as e:
        ModelConfig(**kw)
    assert all(w in str(e.value) for w in words)


def test_unknown_init_names_the_choices():
    with pytest.raises(InputError, match="unknown init 'xavier': use one of gpt2, torch"):
        build_model(ModelConfig(), init="xavier")


def test_seed_none_draws_from_the_global_generator():
    cfg = ModelConfig(layers=1, hidden=32, heads=2, vocab=64, seq_len=16)
    torch.manual_seed(3)
    a = build_model(cfg, seed=None)
    torch.manual_seed(3)
    b = build_model(cfg, seed=None)
    c = build_model(cfg, seed=None)  # the global generator moved on
    wa, wb, wc = (next(m.parameters()) for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_a_sequence_longer_than_the_context_is_refused():
    cfg = ModelConfig(layers=1, hidden=32, heads=2, vocab=64, seq_len=16)
    with pytest.raises(InputError, match="sequence length 17 exceeds the model's seq_len 16"):
        build_model(cfg)(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointing"])
@pytest.mark.parametrize("name,changes", CASES, ids=[f"{n}{c or ''}" for n, c in CASES])
def test_counter_equals_exact_count(name, changes, checkpointing):
    cfg = preset(name).with_(**changes) if changes else preset(name)
    model = build_model(cfg)
    model.checkpointing = checkpointing
    b, s = 3, 40
    x = torch.randint(0, cfg.vocab, (b, s))
    c = count_flops(_step(model, x))
    ex = exact_flops(cfg, b, s, checkpointing=checkpointing)
    assert c.by_phase["forward"] == ex.forward_total
    assert c.by_phase["backward"] == ex.backward_total
    assert c.by_phase["recompute"] == ex.recompute_total
    assert c.total == ex.hardware and c.model == ex.model


def test_forward_only_and_result_returned():
    cfg = preset("tiny-llama")
    model = build_model(cfg)
    x = torch.randint(0, cfg.vocab, (2, 16))
    with torch.no_grad():
        c = count_flops(model, x)
    assert tuple(c.result.shape) == (2, 16, cfg.vocab)
    assert c.total == c.by_phase["forward"] == exact_flops(cfg, 2, 16).forward_total


def test_torch_counter_misses_cpu_attention():
    """torch 2.13's FlopCounterMode has no formula for the CPU attention kernels: on a CPU it comes out
    short by exactly the attention FLOPs (forward, backward, and the kernel's recomputed scores)."""
    cfg = preset("tiny-gpt")
    model = build_model(cfg)
    x = torch.randint(0, cfg.vocab, (2, 64))
    ours = count_flops(_step(model, x))
    theirs, per_op = torch_flop_count(_step(model, x))
    attention = sum(v for k, v in ours.by_op.items() if "attention" in k)
    assert attention > 0
    if not any("attention" in op for op in per_op):
        assert theirs == ours.total - attention


def test_per_module_table():
    cfg = preset("tiny-gpt")
    model = build_model(cfg)
    model.checkpointing = True
    x = torch.randint(0, cfg.vocab, (2, 32))
    c = count_flops(_step(model, x))
    t = c.table(depth=None)
    assert t.loc["Global", "total"] == c.total
    blocks = [m for m in c.by_module if m.count(".") == 2 and ".blocks." in m]
    assert len(blocks) == cfg.layers
    per_block = {sum(c.by_module[m].values()) for m in blocks}
    assert len(per_block) == 1  # identical layers, identical counts (recompute included)
    logits = exact_flops(cfg, 2, 32).forward["logits"] * 3
    assert sum(sum(c.by_module[m].values()) for m in blocks) + logits == c.total
    # a block's layers add up to the block (the attention kernel runs inside Attention)
    b0 = blocks[0]
    kids = [m for m in c.by_module if m.startswith(b0 + ".") and m.count(".") == 3]
    assert sum(sum(c.by_module[k].values()) for k in kids) == sum(c.by_module[b0].values())
    assert "recompute" in t.columns and t["share"].max() == pytest.approx(1.0)
    # every linear layer's backward is twice its forward: booked to the right module
    for m, ph in c.by_module.items():
        if m.count(".") == 4:  # Transformer.blocks.i.attn.q, ...mlp.down
            assert ph["backward"] == 2 * ph["forward"], (m, ph)


def test_per_module_llama_layers():
    """Each linear layer of a Llama block, checkpointed: backward = 2 × forward, recompute = forward
    except the MLP's down projection (the checkpoint stops before it)."""
    cfg = preset("tiny-llama")
    model = build_model(cfg)
    model.checkpointing = True
    x = torch.randint(0, cfg.vocab, (2, 32))
    c = count_flops(_step(model, x))
    leaves = {m: ph for m, ph in c.by_module.items() if m.count(".") == 4}
    assert len(leaves) == cfg.layers * 7
    for m, ph in leaves.items():
        assert ph["backward"] == 2 * ph["forward"], (m, ph)
        assert ph["recompute"] == (0 if m.endswith("mlp.down") else ph["forward"]), (m, ph)


@pytest.mark.gpu
def test_counter_equals_exact_on_cuda_bf16():
    cfg = preset("tiny-llama")
    for ck in (False, True):
        model = build_model(cfg, device="cuda")
        model.checkpointing = ck
        x = torch.randint(0, cfg.vocab, (4, 64), device="cuda")

        def step(model=model, x=x):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = model(x)
            y.float().pow(2).mean().backward()
        c = count_flops(step)
        assert c.total == exact_flops(cfg, 4, 64, checkpointing=ck).hardware


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_activation_formula_equals_saved_storages(name, dtype):
    cfg = VARIANTS[name]
    b, s = 3, 48
    model = build_model(cfg, dtype=probe.torch_dtype(dtype))
    batch = make_batches(cfg, b, s)[0]
    exclude = list(model.parameters()) + list(model.buffers()) + list(batch)
    _, saved = probe.saved_tensors(lambda: model_loss(model, batch), exclude=exclude)
    parts = model_activation_bytes(cfg, b, s, dtype=dtype)
    # the loss scalar is alive but not saved: 4 bytes
    assert saved.total_bytes + 4 == activation_total(parts)
    # and the allocator agrees: what the forward leaves alive is exactly that
    kept = probe.allocated_during(lambda: model_loss(model, batch), "cpu")["kept_bytes"]
    assert kept == activation_total(parts)


@pytest.mark.parametrize("name", ["gpt", "llama"])
def test_checkpointed_activations_exact(name):
    cfg = VARIANTS[name]
    model = build_model(cfg)
    model.checkpointing = True
    batch = make_batches(cfg, 2, 64)[0]
    kept = probe.allocated_during(lambda: model_loss(model, batch), "cpu")["kept_bytes"]
    want = activation_total(model_activation_bytes(cfg, 2, 64, recompute="full")) + cfg.layers * CPU_RNG_STATE_BYTES
    assert kept == want


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


def test_grad_accumulation_equals_one_big_batch():
    """Two micro-batches of 2 with GAS=2 update the weights exactly as one batch of 4 (SGD, float64)."""
    cfg = preset("tiny-gpt")
    (x, y), = make_batches(cfg, 4, 16, n=1, seed=3)
    a = build_model(cfg, dtype=torch.float64, seed=1)
    b = build_model(cfg, dtype=torch.float64, seed=1)
    StepRunner(a, torch.optim.SGD(a.parameters(), lr=0.1)).step([(x, y)])
    StepRunner(b, torch.optim.SGD(b.parameters(), lr=0.1), grad_accum=2).step([(x[:2], y[:2]), (x[2:], y[2:])])
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q)


def test_checkpointing_recomputes_each_block_inside_the_timed_backward():
    """Recomputation happens in the backward, so `StepTimes.backward_s` includes it: with
    checkpointing each block runs again between the step's 'after_forward' and 'after_backward'
    points (the span timed as backward), and not at all without it. What that costs in seconds is a
    measurement (lesson 07), never asserted here: a busy machine can reverse two noisy medians."""
    cfg = preset("tiny-gpt")
    batches = make_batches(cfg, 2, 32, n=1)

    def block_calls(checkpointing: bool) -> tuple[dict[str, int], float]:
        m = build_model(cfg)
        m.checkpointing = checkpointing
        calls = {"forward": 0, "backward": 0}
        phase = ["forward"]

        def count(*_):
            calls[phase[0]] += 1

        def enter(name):
            return lambda *_: phase.__setitem__(0, name)

        for blk in m.blocks:  # a pre-hook: torch's recomputation stops once it has what the backward
            blk.register_forward_pre_hook(count)  # needs, before the block returns, unseen by a (post-)hook
        r = StepRunner(m, hooks={"after_forward": [enter("backward")], "after_backward": [enter("forward")]})
        return calls, r.step([batches[0]]).backward_s

    for ck in (False, True):
        calls, backward_s = block_calls(ck)
        assert calls["forward"] == cfg.layers and backward_s > 0
        assert calls["backward"] == (cfg.layers if ck else 0), (ck, calls)
    a, b = exact_flops(cfg, 8, 128), exact_flops(cfg, 8, 128, checkpointing=True)
    assert b.hardware > a.hardware and b.model == a.model


def test_bad_sizes():
    with pytest.raises(InputError, match="context"):
        make_batches(preset("tiny-gpt"), 2, 4096)
    with pytest.raises(InputError):
        measure_step(preset("tiny-gpt"), batch=0, seq=16, device="cpu")


def test_palm_preset():
    """PaLM Table 1: 540.35B parameters (perflab's serial blocks carry one extra LayerNorm per layer,
    18432 × 118 parameters); with perflab's N the MFU is still 46.2%."""
    cfg = preset("palm-540b")
    assert math.floor(param_count(cfg) / 1e7) / 100 == 540.35
    assert param_count(cfg) - 18432 * 118 == pytest.approx(540.35e9, rel=2e-5)
    f = flops_per_token(cfg, 2048)["palm"]
    assert printed(mfu(238.3e3, f, 275, 6144), 3, "truncate") == 0.462


def test_kaplan_6n_gpt3_total_compute():
    """Brown et al. 2020 Table D.1: GPT-3 175B, 300B tokens, 3.14e23 FLOPs (6·N·D, Kaplan's C ≈ 6N)."""
    c = flops_per_token(preset("gpt3-175b"))["kaplan"] * 300e9
    assert c == pytest.approx(3.14e23, rel=0.01)
    assert flops_per_token(preset("gpt3-175b"))["kaplan"] == 6 * non_embedding_params(preset("gpt3-175b"))


@pytest.mark.parametrize("name", [n for n in PRESETS])
def test_palm_minus_exact_is_six_times_norms_and_biases(name):
    """PaLM's 6N counts every parameter of N six times per token; the exact count has only the matmul
    weights. So palm − exact = 6 × (norm and bias parameters), for any shape (GQA, GLU, tied or not)."""
    cfg = preset(name)
    s = min(cfg.seq_len, 256)
    ft = flops_per_token(cfg, s)
    small = param_count(cfg) - _matmul_weights(cfg) - param_breakdown(cfg)["positions"] - (0 if cfg.tied else param_breakdown(cfg)["embedding"])
    assert ft["palm"] - ft["exact"] == pytest.approx(6 * small, rel=1e-9, abs=1e-3)


def test_small_presets_include_every_course_model():
    assert {"tiny-gpt", "tiny-llama", "small-gpt", "small-llama", "gpt2-small"} <= set(SMALL)


@pytest.mark.slow
@pytest.mark.parametrize("name", SMALL)
def test_untrained_loss_is_ln_v_and_gradients_are_normal(name):
    cfg = PRESETS[name]
    model = build_model(cfg)
    seq = min(cfg.seq_len, 64 if param_count(cfg) < 10e6 else 16)
    batch = make_batches(cfg, 2, seq)[0]
    loss = model_loss(model, batch)
    # a sanely initialised model predicts nearly uniformly: loss ≈ ln V (8.32 for V = 4096)
    assert abs(loss.item() - math.log(cfg.vocab)) < 0.5, (name, loss.item(), math.log(cfg.vocab))
    loss.backward()
    den = count_denormals(model.parameters(), grads=True)
    assert den.total == param_count(cfg)
    assert den.fraction <= 1e-3, (name, den)


def test_init_follows_gpt2():
    """Radford et al. 2019 §2.3 and the GPT-2 code: N(0, 0.02) weights and embeddings, residual
    projections scaled by 1/√(2·L) (2 residual layers per block), zero biases."""
    cfg = PRESETS["small-gpt"]
    m = build_model(cfg)
    assert m.embed.weight.std().item() == pytest.approx(INIT_STD, rel=0.02)
    assert m.blocks[0].attn.q.weight.std().item() == pytest.approx(0.02, rel=0.05)
    resid = torch.cat([b.mlp.down.weight.flatten() for b in m.blocks])
    assert resid.std().item() == pytest.approx(0.02 / math.sqrt(2 * cfg.layers), rel=0.05)
    assert all(float(b.attn.q.bias.detach().abs().max()) == 0 for b in m.blocks)


def test_presets_side_by_side_build_the_small_ones_and_count_them():
    from perflab.workload.models import preset_table

    t = preset_table(("tiny-gpt", "tiny-llama", "llama2-7b"))
    assert t.built[:2] == (param_count(preset("tiny-gpt")), param_count(preset("tiny-llama"))) and t.built[2] is None
    shapes = t.shape_table()
    assert list(shapes.columns) == ["L", "h", "a", "kv", "f", "GLU", "V", "tied"] and shapes.loc["tiny-llama", "kv"] == 2
    counts = t.count_table()
    assert counts.loc["llama2-7b", "param_count"] == "6,738,415,616"  # the published count
    assert counts.loc["llama2-7b", "sum(p.numel()) of the built model"] == "too large to build here"
    assert counts.loc["tiny-gpt", "param_count"] == counts.loc["tiny-gpt", "sum(p.numel()) of the built model"]
