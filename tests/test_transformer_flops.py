"""FLOP conventions, each pinned to a published figure (the test's docstring cites table or equation).

Papers:
* Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM" (arXiv:2104.04473): eq. 2 (parameters), eq. 3 (FLOPs with recomputation),
  eq. 4 (training time) and Table 1.
* Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
  (arXiv:2205.05198): Appendix A eqs. 7, 8, 9; Tables 3 and 5.
* Chowdhery et al. 2022, "PaLM" (arXiv:2204.02311): Table 1, §4.1/Table 3, Appendix B.
* Brown et al. 2020, "Language Models are Few-Shot Learners" (arXiv:2005.14165), Table D.1:
  GPT-3 175B trained on 300B tokens with 3.14e23 FLOPs, counted as 6·N·D (Kaplan et al. 2020's C ≈ 6N).
"""

import math

import pytest

from perflab.core.errors import InputError
from perflab.flops.mfu import mfu, narayanan_table1, printed
from perflab.flops.transformer import (
    CONVENTIONS,
    conventions_frame,
    exact_flops,
    flops_per_token,
    handbook_tflops_estimate,
    korthikanti_eq7,
    korthikanti_eq8,
    megatron_gpt,
    narayanan_eq3,
    narayanan_params_eq2,
    narayanan_training_days,
    palm_flops_per_token,
)
from perflab.workload.models import (
    PRESETS,
    ModelConfig,
    non_embedding_params,
    param_breakdown,
    param_count,
    preset,
)

SHAPES = [(4, 2048, 48, 6144, 51200), (64, 2048, 96, 12288, 51200), (8, 1024, 12, 768, 50257), (1, 37, 3, 40, 101)]


@pytest.mark.parametrize("B,s,L,h,V", SHAPES)
def test_expanded_forms_equal_the_printed_equations(B, s, L, h, V):
    """Narayanan eq. 3 and Korthikanti eqs. 7/8 as printed (factored) equal perflab's integer forms."""
    assert narayanan_eq3(B, s, L, h, V) == pytest.approx(96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h)), rel=1e-12)
    assert korthikanti_eq7(B, s, L, h, V) == pytest.approx(72 * B * L * s * h**2 * (1 + s / (6 * h) + V / (12 * h * L)), rel=1e-12)
    assert korthikanti_eq8(B, s, L, h, V) == pytest.approx(72 * B * L * s * h**2 * (1 + s / (3 * h) + V / (12 * h * L)), rel=1e-12)


# Korthikanti et al. 2022, Table 3 (configs) and Table 5 ("present work" iteration time, MFU, HFU)
TABLE5 = [  # batch, layers, hidden, GPUs, seconds, MFU, HFU
    (4, 48, 6144, 8, 1.10, 0.415, 0.437),
    (64, 96, 12288, 64, 13.75, 0.514, 0.528),
    (280, 105, 20480, 280, 37.83, 0.560, 0.570),
    (512, 128, 25600, 512, 71.49, 0.563, 0.570),
]


@pytest.mark.parametrize("B,L,h,gpus,sec,pub_mfu,pub_hfu", TABLE5)
def test_korthikanti_table5(B, L, h, gpus, sec, pub_mfu, pub_hfu):
    """Korthikanti et al. 2022 Table 5: MFU from eq. 7 and HFU from eq. 8, A100 peak 312 TFLOP/s,
    s = 2048, v = 51200. The iteration times are printed with two decimals, so a row is reproduced
    when the published figure lies within what t ± 0.005 s gives (only the 22B row needs it)."""
    def util(eq, t):
        return eq(B, 2048, L, h, 51200) / t / (gpus * 312e12)

    for eq, pub in ((korthikanti_eq7, pub_mfu), (korthikanti_eq8, pub_hfu)):
        lo, hi = util(eq, sec + 0.005), util(eq, sec - 0.005)
        assert round(lo, 3) <= pub <= round(hi, 3), (eq.__name__, lo, hi, pub)
        if h > 6144:
            assert round(util(eq, sec), 3) == pub


def test_korthikanti_data_parallel_530b():
    """Korthikanti et al. 2022 §6.3: 8-way data parallelism, 2240 GPUs, batch 2240, 39.15 s → MFU 54.2%."""
    assert round(korthikanti_eq7(2240, 2048, 105, 20480, 51200) / 39.15 / (2240 * 312e12), 3) == 0.542


@pytest.mark.parametrize("h", [6144, 12288, 20480, 25600])
def test_korthikanti_eq9_ratio(h):
    """Korthikanti et al. 2022 eq. 9: hardware/model FLOPs ≈ 1 + s/(6h) when 3h ≫ s and 12hL ≫ v."""
    L, s = 96, 2048
    ratio = korthikanti_eq8(1, s, L, h, 51200) / korthikanti_eq7(1, s, L, h, 51200)
    assert ratio == pytest.approx(1 + s / (6 * h), rel=0.005)


@pytest.mark.parametrize("row", narayanan_table1(), ids=lambda r: f"{r['params_b']}B")
def test_narayanan_eq2_reproduces_table1_parameters(row):
    """Narayanan et al. 2021 Table 1, column 'Number of parameters (billion)', from eq. 2 with
    V = 51,200 and s = 2048; perflab's exact count of the same GPT shape adds only the final LayerNorm (2h)."""
    p = narayanan_params_eq2(row["layers"], row["hidden"], 51200, 2048)
    assert round(p / 1e9, 1) == row["params_b"]
    cfg = megatron_gpt(row["layers"], row["hidden"], row["heads"])
    assert param_count(cfg) == p + 2 * row["hidden"]


@pytest.mark.parametrize("row", narayanan_table1(), ids=lambda r: f"{r['params_b']}B")
def test_narayanan_table1_peak_is_dense_bf16(row):
    """Narayanan et al. 2021 Table 1: 'percentage of theoretical peak' = TFLOP/s per GPU / 312 (the
    A100's dense bf16 peak, as perflab's table has it), and aggregate = per GPU × GPUs."""
    from perflab.core.hardware import by_id

    peak = by_id("a100-sxm-80gb").peak("bf16")
    assert peak == 312
    assert round(row["tflops_per_gpu"] / peak, 2) == row["peak_fraction"]
    # the per-GPU column is printed as a whole number: aggregate / GPUs rounds to it
    assert abs(row["aggregate_pflops"] * 1e3 / row["gpus"] - row["tflops_per_gpu"]) <= 0.5


def test_narayanan_table1_is_hfu_by_korthikanti_definition():
    """Table 1's 52% for the 1T model counts recomputation (eq. 3): the same run's MFU (eq. 7) is 3/4-ish."""
    row = narayanan_table1()[-1]
    ratio = korthikanti_eq7(1, 2048, 128, 25600, 51200) / narayanan_eq3(1, 2048, 128, 25600, 51200)
    assert 0.74 < ratio < 0.76
    assert 0.38 < row["peak_fraction"] * ratio < 0.40


@pytest.mark.parametrize("tokens,params,gpus,x,days", [(300e9, 175e9, 1024, 140, 34), (450e9, 1008e9, 3072, 163, 84)])
def test_narayanan_eq4_training_days(tokens, params, gpus, x, days):
    """Narayanan et al. 2021 §5.1 eq. 4: GPT-3 (175B, 300B tokens, 1024 A100 at 140 TFLOP/s) ≈ 34 days;
    1T (1008B of Table 1, 450B tokens, 3072 A100 at 163 TFLOP/s) ≈ 84 days."""
    assert round(narayanan_training_days(tokens, params, gpus, x)) == days


@pytest.mark.parametrize("tps,n,L,H,Q,devices,peak,pub,pub_no_attn", [
    (238.3e3, 540.35e9, 118, 48, 256, 6144, 275, 0.462, 0.457),
    (65.43e3, 530e9, 105, 128, 160, 2240, 312, 0.302, 0.297),
])
def test_palm_mfu(tps, n, L, H, Q, devices, peak, pub, pub_no_attn):
    """PaLM §4.1 / Table 3 and Appendix B: PaLM 540B 238.3K tokens/s on 6144 TPU v4 (275 TFLOP/s)
    → 45.7% without / 46.2% with self-attention; MT-NLG 530B 65.43K tokens/s on 2240 A100 → 29.7% / 30.2%.
    The paper truncates to one decimal (46.23% → 46.2%, 30.27% → 30.2%)."""
    with_attn = mfu(tps, palm_flops_per_token(n, L, H, Q, 2048), peak, devices)
    without = mfu(tps, 6 * n, peak, devices)
    assert printed(with_attn, 3, "truncate") == pub
    assert printed(without, 3, "truncate") == pub_no_attn


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


def test_seed_estimate_slightly_underestimates_eq3():
    """The handbook's model_B·4·2·seqlen·GBS/(sec·gpus·1e3) (seeds/000) ignores attention and logits,
    so it comes out a little below Narayanan eq. 3 for the same run (1T row of Table 1)."""
    row = narayanan_table1()[-1]
    sec = narayanan_eq3(row["batch"], 2048, 128, 25600, 51200) / (row["gpus"] * row["tflops_per_gpu"] * 1e12)
    est = handbook_tflops_estimate(row["params_b"], 2048, row["batch"], sec, row["gpus"], recompute=True)
    assert 0.95 * row["tflops_per_gpu"] < est < row["tflops_per_gpu"]
    assert handbook_tflops_estimate(52, 2048, 1024, 127, 64, recompute=False) == pytest.approx(
        0.75 * handbook_tflops_estimate(52, 2048, 1024, 127, 64))


@pytest.mark.parametrize("name", ["gpt2-small", "megatron-22b", "gpt3-175b"])
def test_exact_equals_megatron_for_gpt_shapes(name):
    """For a GPT shape (4h MLP, multi-head attention) the exact count IS Korthikanti eq. 7, and with full
    recomputation of every layer and an unfused attention kernel it IS Narayanan eq. 3 — to the FLOP."""
    cfg = preset(name)
    ex = exact_flops(cfg, 2, 512)
    assert ex.model == korthikanti_eq7(2, 512, cfg.layers, cfg.hidden, cfg.vocab)
    full = exact_flops(cfg, 2, 512, checkpointing=True, fused_attention=False, checkpoint_early_stop=False)
    assert full.hardware == narayanan_eq3(2, 512, cfg.layers, cfg.hidden, cfg.vocab)


@pytest.mark.parametrize("name", [n for n in PRESETS])
def test_palm_minus_exact_is_six_times_norms_and_biases(name):
    """PaLM's 6N counts every parameter of N six times per token; the exact count has only the matmul
    weights. So palm − exact = 6 × (norm and bias parameters), for any shape (GQA, GLU, tied or not)."""
    cfg = preset(name)
    s = min(cfg.seq_len, 256)
    ft = flops_per_token(cfg, s)
    small = param_count(cfg) - _matmul_weights(cfg) - param_breakdown(cfg)["positions"] - (0 if cfg.tied else param_breakdown(cfg)["embedding"])
    assert ft["palm"] - ft["exact"] == pytest.approx(6 * small, rel=1e-9, abs=1e-3)


def _matmul_weights(cfg: ModelConfig) -> int:
    h, a, kv, d, f = cfg.hidden, cfg.heads, cfg.n_kv, cfg.d_head, cfg.d_ff
    per_layer = h * a * d + 2 * h * kv * d + a * d * h + (3 if cfg.glu else 2) * h * f
    return cfg.layers * per_layer + cfg.vocab * h  # + the output matrix (tied: the embedding)


def test_gqa_and_glu_change_exact_but_not_megatron():
    base = preset("tiny-gpt")
    gqa = base.with_(kv_heads=1)
    glu = base.with_(glu=True, ffn=512)
    f0, f1, f2 = flops_per_token(base, 128), flops_per_token(gqa, 128), flops_per_token(glu, 128)
    assert f1["exact"] < f0["exact"] and f2["exact"] > f0["exact"]
    assert f1["megatron"] == f0["megatron"] == f2["megatron"]


def test_per_token_does_not_depend_on_batch_and_keys():
    cfg = preset("tiny-llama")
    assert set(flops_per_token(cfg)) == set(CONVENTIONS)
    assert exact_flops(cfg, 1, 64).model / 64 == exact_flops(cfg, 5, 64).model / (5 * 64)


def test_checkpointing_recomputes_all_but_the_last_product():
    cfg = preset("tiny-llama")
    a, b = exact_flops(cfg, 2, 64), exact_flops(cfg, 2, 64, checkpointing=True)
    assert a.model == b.model
    layer_fwd = (a.forward_total - a.forward["logits"]) // cfg.layers
    down = a.forward["mlp_down"] // cfg.layers
    assert b.recompute_total - a.recompute_total == cfg.layers * (layer_fwd - down)


def test_conventions_frame_and_bad_input():
    df = conventions_frame(preset("gpt2-small"), 1024, 4, checkpointing=True)
    assert df.loc["exact (perflab)", "vs_exact_model"] == 0
    assert df.loc["exact hardware (this run)", "flops_per_token"] > df.loc["exact (perflab)", "flops_per_token"]
    with pytest.raises(InputError):
        exact_flops(preset("tiny-gpt"), 0, 16)
    with pytest.raises(InputError):
        flops_per_token(preset("tiny-gpt"), -3)


def test_exact_for_counted_picks_the_kernel():
    from perflab.flops.transformer import exact_for_counted

    cfg = preset("tiny-gpt")
    fused, unfused = exact_flops(cfg, 2, 32), exact_flops(cfg, 2, 32, fused_attention=False)
    assert exact_for_counted(cfg, 2, 32, fused.hardware).fused_attention is True
    assert exact_for_counted(cfg, 2, 32, 3 * unfused.hardware, steps=3).fused_attention is False
    with pytest.raises(AssertionError, match="exact count"):
        exact_for_counted(cfg, 2, 32, fused.hardware + 2)
