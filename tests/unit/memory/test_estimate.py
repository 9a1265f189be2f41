"""Tests of `perflab.memory.estimate`."""

from __future__ import annotations

import json

import clirun
import pytest
import torch

from perflab.core.errors import InputError
from perflab.memory import estimate as E
from perflab.memory import plots, probe
from perflab.memory.estimate import (
    CPU_RNG_STATE_BYTES,
    activation_total,
    activations_per_layer_bytes,
    batch_plan,
    bytes_per_param,
    estimate,
    model_activation_bytes,
    model_state_bytes,
    output_activation_bytes,
)
from perflab.workload.models import param_count, preset

# GPT-3 175B as in their Table 3: h 12288, a 96, s 2048, t 8
S, B, H, A, T = 2048, 1, 12288, 96, 8


SBH = S * B * H


def perflab(*args):
    return clirun.perflab("memory", *args)


def test_logits_and_loss_gradient_formulas():
    assert E.logits_fp32_bytes(128, 2, 50257, t=2) == 4.0 * 128 * 2 * 50257 / 2
    n = 2 * 8 * 100
    assert E.loss_gradient_bytes(2, 8, 100) == 2 * n * 4  # fp32 logits: no cast back
    assert E.loss_gradient_bytes(2, 8, 100, logits_bytes=2) == 2 * n * 4 + 2 * n


def test_perflab_model_has_no_selective_recompute():
    with pytest.raises(InputError, match=r"^perflab's model supports recompute 'none' or 'full' \(model.checkpointing = True\)$"):
        E.model_activation_bytes(preset("tiny-gpt"), 2, 32, recompute="selective")


def test_phase_predictions_refuse_an_optimizer_torch_does_not_ship():
    with pytest.raises(InputError, match=r"^phase predictions cover the optimizers torch ships: adamw, adamw-fused, sgd "
                                         r"\(got 'adafactor'; use estimate\(\) for the others\)$"):
        E.step_phases(preset("tiny-gpt"), 2, 32, optimizer="adafactor")


def test_step_phase_row_spells_out_its_parts():
    p = E.StepPhase("forward", 1, 300, 400, {"weights": 100, "activations": 200}, "fp32 logits")
    assert p.as_dict() == {"phase": "forward", "iteration": 1, "end_bytes": 300, "peak_bytes": 400,
                           "peak_note": "fp32 logits", "weights_bytes": 100, "activations_bytes": 200}


def test_gib_sized_bars_with_the_devices_capacity():
    import matplotlib.pyplot as plt

    assert plots._unit(2 * E.GiB) == (E.GiB, "GiB")
    fig = plots.stacked_bars({"run": {"weights": 2 * E.GiB, "activations": E.GiB}}, capacity=4 * E.GiB,
                             capacity_label="16 GB card")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "memory (GiB)"
    assert [list(ln.get_ydata()) for ln in ax.get_lines()] == [[4.0, 4.0]]  # the capacity line, in GiB
    assert " 16 GB card" in [t.get_text() for t in ax.texts]
    plt.close(fig)


@pytest.mark.parametrize("kw, words", [
    (dict(), "give --params N, a --preset, or --layers and --hidden"),
    (dict(params=1e9, batch=2, seq=128), "activations need --batch and --seq"),
    (dict(params=1e9, batch=2, seq=128, layers=2, hidden=64, heads=2, activation_model="perflab"),
     "activation model 'perflab' needs a preset"),
    (dict(params=1e9, batch=2, seq=128, layers=2, hidden=64, heads=2, activation_model="guess"),
     "activation model must be 'paper' or 'perflab' (got 'guess')"),
])
def test_estimate_refuses_what_it_cannot_predict(kw, words):
    with pytest.raises(InputError) as e:
        E.estimate(**kw)
    assert words in str(e.value)


def test_estimate_table_adds_a_total_row():
    est = E.estimate(1e9, precision="mixed", optimizer="adamw")
    t = est.table()
    assert list(t["component"])[-1] == "total" and t["bytes"].iloc[-1] == round(est.total_bytes)
    assert est.model_state_bytes == pytest.approx(est.total_bytes)  # no activations asked for


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


def test_rng_state_constant():
    assert torch.get_rng_state().numel() == CPU_RNG_STATE_BYTES


@pytest.mark.parametrize("name,dtype,optimizer,ckpt", [
    ("tiny-gpt", "fp32", "adamw", False),
    ("tiny-llama", "fp32", "adamw-fused", False),
    ("tiny-gpt", "bf16", "sgd", True),
    ("tiny-llama", "bf16", "adamw", True),
])
def test_phases_predicted_exactly_on_cpu(name, dtype, optimizer, ckpt):
    rep = probe.measure_step_phases(preset(name), batch=2, dtype=dtype, optimizer=optimizer, checkpointing=ckpt,
                                       device="cpu")
    assert [(r["phase"], r["iteration"]) for r in rep.rows] == [(p.phase, p.iteration) for p in rep.predicted]
    for r, p in zip(rep.rows, rep.predicted):
        assert r["allocated_bytes"] == p.end_bytes, (r["phase"], r["iteration"])
        assert r["peak_bytes"] == pytest.approx(p.peak_bytes, rel=0.005), (r["phase"], r["iteration"])
        assert r["rss_bytes"] > 0
    assert rep.peak_bytes == pytest.approx(rep.predicted_peak_bytes, rel=0.005)
    comps = rep.components()
    acts = activation_total(model_activation_bytes(preset(name), 2, dtype=dtype, recompute="full" if ckpt else "none"))
    assert comps["activations"] == acts + (preset(name).layers * CPU_RNG_STATE_BYTES if ckpt else 0)


def test_every_precision_and_optimizer_in_one_table():
    from perflab.memory.estimate import bytes_per_param_table

    t = bytes_per_param_table()
    assert len(t) == 3 * 5 + 5  # mixed precision twice: fp32 and fp16 gradients
    mixed = t[(t["precision"] == "mixed") & (t["optimizer"] == "adamw")]
    assert list(mixed["gradients in"]) == ["fp32", "fp16"] and list(mixed["total (B per parameter)"]) == ["18", "16"]
    bf16 = t[(t["precision"] == "bf16") & (t["optimizer"] == "adamw")].iloc[0]
    assert bf16["total (B per parameter)"] == "8" and bf16["gradients in"] == "bf16"
    assert t[t["optimizer"] == "adam8bit"]["optimizer states (B)"].iloc[0] == "2.0039"  # 2 bytes + 2 fp32 scales per 2048
