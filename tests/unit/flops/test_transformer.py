"""Tests of `perflab.flops.transformer`."""


import pytest

from perflab.core.errors import InputError
from perflab.flops import lab02 as lab
from perflab.flops.mfu import narayanan_table1
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
)
from perflab.grading.checks import LabCheckError
from perflab.workload.models import (
    param_count,
    preset,
)

S, TPS, PEAK = 64, 12345.0, 0.2


def _want():
    ex = exact_flops(preset("tiny-gpt"), 1, S)
    return TPS * ex.model / S / (PEAK * 1e12)


def _check(value, **kw):
    return lab.check_step_mfu(value, tokens_per_s=TPS, model=kw.pop("model", "tiny-gpt"), seq=S, peak_tflops=PEAK, **kw)


SHAPES = [(4, 2048, 48, 6144, 51200), (64, 2048, 96, 12288, 51200), (8, 1024, 12, 768, 50257), (1, 37, 3, 40, 101)]


# Korthikanti et al. 2022, Table 3 (configs) and Table 5 ("present work" iteration time, MFU, HFU)
TABLE5 = [  # batch, layers, hidden, GPUs, seconds, MFU, HFU
    (4, 48, 6144, 8, 1.10, 0.415, 0.437),
    (64, 96, 12288, 64, 13.75, 0.514, 0.528),
    (280, 105, 20480, 280, 37.83, 0.560, 0.570),
    (512, 128, 25600, 512, 71.49, 0.563, 0.570),
]


def test_step_mfu_names_a_forward_only_count_and_a_missing_peak():
    with pytest.raises(LabCheckError, match="forward's FLOPs only"):
        _check(_want() / 3)
    with pytest.raises(LabCheckError, match="peak is missing from the denominator"):
        _check(_want() * PEAK)


def test_time_estimates_refuse_zero_gpus():
    with pytest.raises(InputError, match="gpus and tflops_per_gpu must be > 0"):
        narayanan_training_days(3e11, 1.75e11, 0, 140)
    with pytest.raises(InputError, match="seconds per iteration and number of GPUs must be > 0"):
        handbook_tflops_estimate(175, 2048, 1536, 0.0, 1024)


def test_exact_count_per_token_and_hardware():
    ex = exact_flops(preset("tiny-gpt"), 2, S, checkpointing=True)
    assert ex.per_token() == ex.model / ex.tokens
    assert ex.per_token("hardware") == ex.hardware / ex.tokens > ex.per_token()


@pytest.mark.parametrize("B,s,L,h,V", SHAPES)
def test_expanded_forms_equal_the_printed_equations(B, s, L, h, V):
    """Narayanan eq. 3 and Korthikanti eqs. 7/8 as printed (factored) equal perflab's integer forms."""
    assert narayanan_eq3(B, s, L, h, V) == pytest.approx(96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h)), rel=1e-12)
    assert korthikanti_eq7(B, s, L, h, V) == pytest.approx(72 * B * L * s * h**2 * (1 + s / (6 * h) + V / (12 * h * L)), rel=1e-12)
    assert korthikanti_eq8(B, s, L, h, V) == pytest.approx(72 * B * L * s * h**2 * (1 + s / (3 * h) + V / (12 * h * L)), rel=1e-12)


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


def test_handbook_estimate_slightly_underestimates_eq3():
    """The handbook's model_B·4·2·seqlen·GBS/(sec·gpus·1e3) ignores attention and logits,
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


def test_the_counter_check_holds_perflabs_count_to_the_exact_one():
    from perflab.flops import transformer as tf
    from perflab.workload.models import preset

    cfg = preset("tiny-gpt").with_(layers=1, hidden=32, heads=2, ffn=64, vocab=64, seq_len=16)
    check = tf.counter_check(cfg, 2, 16, device="cpu")
    for ck in (False, True):
        assert check.counted[ck].total == check.exact[ck].hardware
        assert check.counted[ck].model == check.exact[ck].model
    assert check.exact[True].hardware > check.exact[False].hardware  # the recomputed forward
    lines = check.text().splitlines()
    assert lines[0].startswith(f"checkpointing=False: perflab counts {check.counted[False].total:,} = exact ")
    assert "torch's FlopCounterMode" in lines[1] and lines[2] == str(check.counted[True])
