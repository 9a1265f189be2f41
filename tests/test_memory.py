"""The memory estimator against published figures.

Sources cited below:
* ZeRO: Rajbhandari, Rasley, Ruwase, He, "ZeRO: Memory Optimizations Toward Training Trillion
  Parameter Models", SC 2020 (arXiv:1910.02054). Figure 1 and §5: a 7.5B-parameter model with
  Adam in mixed precision (K = 12) on N_d = 64 data-parallel GPUs needs 120 GB per GPU for the
  baseline (2Ψ + 2Ψ + KΨ), 31.4 GB with P_os, 16.6 GB with P_os+g and 1.9 GB with P_os+g+p.
* Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", MLSys 2023
  (arXiv:2205.05198). §4.1 eq. 1: activations per layer sbh(34 + 5as/h) bytes, itemised as
  attention 11sbh + 5as²b, MLP 19sbh, LayerNorms 4sbh; Table 2: per-layer memory for no
  parallelism sbh(34 + 5as/h); tensor parallel sbh(10 + 24/t + 5as/(ht)); tensor + sequence parallel
  sbh/t·(34 + 5as/h); tensor parallel + selective recomputation sbh(10 + 24/t); tensor + sequence
  parallel + selective sbh·34/t; full recomputation 2sbh. §4.3: the extra activations outside the
  layers, sbhL/t·(p/L + δ_{p=1}·(4/L)(1 + v/h)), with the fp32 logits 4sbv/t.
* Bytes per parameter: 18 for mixed-precision AdamW with fp32 gradients (4+2 weights, 4 gradients,
  8 optimizer) and 8 for pure bf16 AdamW (ML Engineering, S. Bekman, chapter "Software tuning for
  best performance", section "Anatomy of model's memory usage" and "Memory-efficient optimizers").
* Batch arithmetic (same chapter, section "Batch sizes"): 8 GPUs, MBS 4, pure DP → GBS 32;
  TP 2, PP 2 → DP 2, GBS 8; GAS 4, DP 8 → GBS 128.
"""

import json

import clirun
import pytest

from perflab.core.errors import InputError
from perflab.memory.estimate import (
    activations_per_layer_bytes,
    batch_plan,
    bytes_per_param,
    estimate,
    model_state_bytes,
    output_activation_bytes,
)
from perflab.workload.models import param_count, preset

# ---------------------------------------------------------------- ZeRO, Figure 1


@pytest.mark.parametrize("stage,gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_figure1_7p5b_on_64_gpus(stage, gb):
    est = estimate(7.5e9, precision="mixed", grad_dtype="fp16", optimizer="adamw", zero=stage, dp=64)
    assert round(est.total_bytes / 1e9, 1) == gb


def test_zero_paper_k12_and_memory_formulas():
    # §5: baseline (2 + 2 + K)Ψ; P_os 4Ψ + KΨ/Nd; P_os+g 2Ψ + (2 + K)Ψ/Nd; P_os+g+p (4 + K)Ψ/Nd
    psi, nd, k = 7.5e9, 64, 12
    per = bytes_per_param("mixed", "adamw", "fp16")
    assert per["master_weights"] + per["optimizer_states"] == k
    expect = {0: (4 + k) * psi, 1: 4 * psi + k * psi / nd, 2: 2 * psi + (2 + k) * psi / nd, 3: (4 + k) * psi / nd}
    for stage, want in expect.items():
        got = sum(model_state_bytes(psi, "mixed", "adamw", "fp16", zero=stage, dp=nd).values())
        assert got == pytest.approx(want)


def test_18_and_16_bytes_per_parameter():
    assert sum(bytes_per_param("mixed", "adamw").values()) == 18  # fp32 gradients by default
    assert sum(bytes_per_param("mixed", "adamw", "bf16").values()) == 16  # the ZeRO paper's accounting
    assert sum(bytes_per_param("fp32", "adamw").values()) == 16
    assert sum(bytes_per_param("bf16", "adamw").values()) == 8  # pure bf16 AdamW (AnyPrecisionAdamW)


@pytest.mark.parametrize("opt,state_bytes", [
    ("adamw", 8), ("adamw-fused", 8), ("sgd", 4), ("lion", 4), ("adafactor", 4),
    ("adam8bit", 2 + 2 * 4 / 2048),  # one byte per moment + one fp32 scale per 2048-value block
])
def test_optimizer_state_bytes(opt, state_bytes):
    assert bytes_per_param("mixed", opt)["optimizer_states"] == pytest.approx(state_bytes)


def test_zero_stages_partition_the_right_parts():
    full = model_state_bytes(1e9, "mixed", "adamw", zero=0, dp=8)
    z1 = model_state_bytes(1e9, "mixed", "adamw", zero=1, dp=8)
    z2 = model_state_bytes(1e9, "mixed", "adamw", zero=2, dp=8)
    z3 = model_state_bytes(1e9, "mixed", "adamw", zero=3, dp=8)
    assert z1["optimizer_states"] == full["optimizer_states"] / 8 and z1["master_weights"] == full["master_weights"] / 8
    assert z1["gradients"] == full["gradients"] and z2["gradients"] == full["gradients"] / 8
    assert z2["weights"] == full["weights"] and z3["weights"] == full["weights"] / 8


def test_bad_model_state_inputs():
    with pytest.raises(InputError, match="ZeRO stage"):
        model_state_bytes(1e9, zero=4)
    with pytest.raises(InputError, match="unknown optimizer"):
        bytes_per_param("mixed", "adagrad")
    with pytest.raises(InputError, match="positive"):
        model_state_bytes(-5)
    with pytest.raises(InputError, match="dp"):
        model_state_bytes(1e9, zero=1, dp=0)


# ---------------------------------------------------------------- Korthikanti et al. 2022

# GPT-3 175B as in their Table 3: h 12288, a 96, s 2048, t 8
S, B, H, A, T = 2048, 1, 12288, 96, 8
SBH = S * B * H


def test_eq1_is_the_sum_of_its_itemised_parts():
    # §4.1: attention: QKV input 2sbh, QK^T 4sbh, softmax 2as²b, softmax dropout mask as²b,
    # attention over V 2as²b + 2sbh, projection input 2sbh, dropout mask sbh → 11sbh + 5as²b
    attention = 2 * SBH + 4 * SBH + 2 * A * S * S * B + A * S * S * B + (2 * A * S * S * B + 2 * SBH) + 2 * SBH + SBH
    mlp = 2 * SBH + 8 * SBH + 8 * SBH + SBH  # two linear inputs, GeLU input, dropout mask → 19sbh
    layernorm = 4 * SBH
    assert activations_per_layer_bytes(S, B, H, A) == pytest.approx(attention + mlp + layernorm)
    assert attention == 11 * SBH + 5 * A * S * S * B


@pytest.mark.parametrize("t,sp,recompute,formula", [
    (1, False, "none", SBH * (34 + 5 * A * S / H)),  # Table 2, no parallelism (eq. 1)
    (T, False, "none", SBH * (10 + 24 / T + 5 * A * S / (H * T))),  # tensor parallel (eq. 2)
    (T, True, "none", SBH / T * (34 + 5 * A * S / H)),  # tensor + sequence parallel
    (T, False, "selective", SBH * (10 + 24 / T)),  # tensor parallel + selective recomputation
    (T, True, "selective", SBH * 34 / T),  # tensor + sequence parallel + selective recomputation
    (T, True, "full", 2 * SBH),  # full activation recomputation
    (1, False, "selective", 34 * SBH),
])
def test_table2(t, sp, recompute, formula):
    assert activations_per_layer_bytes(S, B, H, A, t=t, sp=sp, recompute=recompute) == pytest.approx(formula)


def test_section_4_3_extra_activations_and_fp32_logits():
    L, v = 96, 51200
    for p in (1, 4):
        want = SBH * L / T * (p / L + (4 / L) * (1 + v / H) * (p == 1))
        assert output_activation_bytes(S, B, H, v, t=T, p=p) == pytest.approx(want)


def test_selective_recompute_halves_gpt3_activations():
    # §5: for GPT-3 5as/h = 80 > 34, so dropping it keeps less than half
    full = activations_per_layer_bytes(S, B, H, A)
    sel = activations_per_layer_bytes(S, B, H, A, recompute="selective")
    assert 5 * A * S / H == 80 and sel / full < 0.5


def test_activation_bad_inputs():
    with pytest.raises(InputError, match="divisible by the tensor-parallel"):
        activations_per_layer_bytes(128, 1, 768, 12, t=5)
    with pytest.raises(InputError, match="recompute"):
        activations_per_layer_bytes(128, 1, 768, 12, recompute="half")
    with pytest.raises(InputError, match="≥ 1"):
        activations_per_layer_bytes(0, 1, 768, 12)


def test_estimate_with_a_preset_adds_activations():
    cfg = preset("gpt2-small")
    est = estimate(cfg=cfg, batch=2)
    assert est.inputs["params"] == param_count(cfg)
    per = activations_per_layer_bytes(cfg.seq_len, 2, cfg.hidden, cfg.heads)
    assert est.activations_per_layer_bytes == per
    want = cfg.layers * per + output_activation_bytes(cfg.seq_len, 2, cfg.hidden, cfg.vocab)
    assert est.components["activations"] == pytest.approx(want)
    d = est.as_dict()
    assert d["total_bytes"] == pytest.approx(sum(d["components_bytes"].values()), abs=len(d["components_bytes"]))


# ---------------------------------------------------------------- batch arithmetic


def test_batch_arithmetic_examples():
    assert batch_plan(8, mbs=4).gbs == 32
    p = batch_plan(8, tp=2, pp=2, mbs=4)
    assert (p.dp, p.gbs) == (2, 8)
    assert batch_plan(8, mbs=4, gas=4).gbs == 128
    assert batch_plan(64, tp=8, pp=2, mbs=2, gbs=1024).gas == 128


def test_batch_arithmetic_errors():
    with pytest.raises(InputError, match="multiple of 4"):
        batch_plan(6, tp=2, pp=2)
    with pytest.raises(InputError, match="not a multiple"):
        batch_plan(8, mbs=3, gbs=100)


# ---------------------------------------------------------------- the command


def perflab(*args):
    return clirun.perflab("memory", *args)


def test_cli_json_zero_figure():
    r = perflab("--params", "7.5e9", "--precision", "mixed", "--grad-dtype", "fp16", "--zero", "2", "--dp", "64", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert round(d["total_bytes"] / 1e9, 1) == 16.6
    assert set(d["components_bytes"]) == {"weights", "master_weights", "gradients", "optimizer_states"}
    assert d["bytes_per_param_total"] == 16


def test_cli_json_activations_and_batch():
    r = perflab("--layers", "96", "--hidden", "12288", "--heads", "96", "--batch", "1", "--seq", "2048", "--tp", "8",
                "--sp", "--recompute", "selective", "--gpus", "64", "--pp", "2", "--gas", "4", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["activations_per_layer_bytes"] == SBH * 34 // 8
    assert d["batch"]["dp"] == 4 and d["batch"]["gbs"] == 16
    assert d["components_bytes"]["activations"] == 96 * SBH * 34 // 8


def test_cli_perflab_activations_match_the_model_formula():
    from perflab.memory.estimate import activation_total, model_activation_bytes

    r = perflab("--preset", "small-gpt", "--precision", "fp32", "--batch", "3", "--activations", "perflab", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["components_bytes"]["activations"] == activation_total(model_activation_bytes(preset("small-gpt"), 3))


@pytest.mark.parametrize("args,needle", [
    (["--params", "0"], "positive"),
    (["--params", "1e9", "--zero", "5"], "invalid choice"),
    (["--preset", "gpt5"], "unknown preset"),
    (["--params", "1e9", "--optimizer", "adagrad"], "unknown optimizer"),
    (["--params", "1e9", "--batch", "2"], "shape"),
    (["--layers", "2", "--hidden", "64", "--heads", "6", "--batch", "1", "--seq", "8", "--tp", "4"], "divisible"),
    (["--params", "1e9", "--gpus", "6", "--tp", "4"], "multiple of 4"),
    (["--params", "1e9", "--gas", "4"], "--gpus"),
    ([], "describe the model"),
])
def test_cli_bad_arguments_one_line(args, needle):
    r = perflab(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert needle in err, err


def test_the_memory_panel_measures_what_fits_its_budgets_and_says_why_not_otherwise():
    from perflab.memory import plots as mplots

    fig, table = mplots.memory_view("tiny-gpt", batch=1, seq=32, device="cpu")
    assert "prediction only" not in fig.axes[0].get_title() and len(table.columns) >= 2  # predicted and measured
    # a step predicted to take longer than the slider's budget is not started; the title says so
    fig, table = mplots.memory_view("tiny-gpt", batch=1, seq=32, device="cpu", measure_budget_s=1e-9)
    title = fig.axes[0].get_title()
    assert "too slow to measure in a slider" in title and "perflab memory --measure --preset tiny-gpt" in title
    assert len(table.columns) == 1, table.columns  # the prediction alone
