"""Where fp8 would pay: the step's GEMMs by shape, each predicted as lesson 16 predicts one GEMM
(`perflab.numerics.speed.predict`), on the GPU named or the one audited; a CPU predicts nothing by itself.

Checked on a Hugging Face GPT-2 at GPT-2 small's width (h = 768, 12 heads; one layer, a small
vocabulary) and 4096 tokens, where on an H100 the MLP's widest GEMM pays in fp8 and the others do not,
and on perflab's built-in example step (lab 11's tiny GPT), where none does."""

import pytest
import torch

from perflab.audit.fp8 import choose_gpu, gains, gpu_spec
from perflab.core.device import DeviceInfo
from perflab.core.errors import InputError
from perflab.core.hardware import by_id
from perflab.numerics.speed import predict

H100 = "h100-sxm"
GPT2_WIDE = {"n_layer": 1, "n_embd": 768, "n_head": 12, "vocab_size": 256, "n_positions": 128}
BATCH, SEQ = 32, 128  # 4096 tokens


@pytest.fixture(scope="module")
def gpt2():
    pytest.importorskip("transformers")
    from perflab.audit.run import fp8_step
    from perflab.audit.target import from_hf_config

    return fp8_step(from_hf_config("gpt2", GPT2_WIDE, batch=BATCH, seq=SEQ), gpu=H100, device="cpu")


def linear_gemms(tokens: int, layers: list[tuple[int, int]]) -> dict[tuple[int, int, int], int]:
    """(m, n, k) → calls of a linear layer y = x·W (W: in × out) in a training step: the forward (T, out, in),
    the input's gradient g·Wᵀ (T, in, out) and the weight's gradient xᵀ·g (in, out, T)."""
    out: dict[tuple[int, int, int], int] = {}
    for i, o in layers:
        for mnk in ((tokens, o, i), (tokens, i, o), (i, o, tokens)):
            out[mnk] = out.get(mnk, 0) + 1
    return out


def test_the_step_s_gemms_are_its_linear_layers_three_products(gpt2):
    h, v, t = GPT2_WIDE["n_embd"], GPT2_WIDE["vocab_size"], BATCH * SEQ
    lm_head = {(t, v, h): 1, (t, h, v): 1, (v, h, t): 1}  # nn.Linear: its weight is V × h, the gradient gᵀ·x
    want = linear_gemms(t, [(h, 3 * h), (h, h), (h, 4 * h), (4 * h, h)])
    for mnk, c in lm_head.items():
        want[mnk] = want.get(mnk, 0) + c
    assert {(g.m, g.n, g.k): g.calls for g in gpt2.gemms} == want
    # the matmul FLOPs without a 2-D shape are attention's: 2·2·b·s²·h forward (dense), twice that backward
    assert gpt2.other_flops == 12 * BATCH * SEQ**2 * h * GPT2_WIDE["n_layer"]
    assert sum(g.share for g in gpt2.gemms) + gpt2.other_flops / gpt2.matmul_flops == pytest.approx(1.0)
    assert [g.flops for g in gpt2.gemms] == sorted((g.flops for g in gpt2.gemms), reverse=True)


def test_each_gemm_is_predicted_as_lesson_16_predicts_one(gpt2):
    for g in gpt2.gemms:
        p = predict(g.m, g.n, g.k, H100)
        assert g.prediction == p
        assert g.bf16_s == pytest.approx(g.calls * p.bf16_s) and g.fp8_s == pytest.approx(g.calls * p.fp8_s)
        assert g.cast_s == pytest.approx(g.calls * p.cast_s) and g.speedup == pytest.approx(p.speedup)
        assert g.fp8_wins == (p.speedup > 1)


def test_some_gemms_win_and_some_lose_at_this_size(gpt2):
    """The MLP's widest product, (T, 4h, h): its up-projection's forward and its down-projection's input
    gradient, wins; the attention projections and the narrower products lose."""
    t, h = BATCH * SEQ, GPT2_WIDE["n_embd"]
    assert [(g.m, g.n, g.k, g.calls) for g in gpt2.winners] == [(t, 4 * h, h, 2)]
    assert len(gpt2.losers) == len(gpt2.gemms) - 1
    text = gpt2.text()
    assert text.startswith("where fp8 would pay on NVIDIA H100 SXM5 80GB (the GPU named; the audit ran on a CPU")
    assert "1 of 12 GEMM shapes predicted faster in fp8" in text and f"  {t}×{4 * h}×{h}, 2, " in text
    assert "stay in bf16 (fp8 predicted slower): 11 shape(s)" in text


def test_the_step_s_matmuls_in_all(gpt2):
    """Every GEMM in bf16 against fp8 where it wins, the FLOPs without a 2-D shape at the bf16 peak in both."""
    peak = float(by_id(H100).peak("bf16") or 0) * 1e12
    rest = gpt2.other_flops / peak
    bf16 = sum(g.calls * predict(g.m, g.n, g.k, H100).bf16_s for g in gpt2.gemms) + rest
    best = sum(g.calls * min(predict(g.m, g.n, g.k, H100).bf16_s, predict(g.m, g.n, g.k, H100).fp8_s)
               for g in gpt2.gemms) + rest
    assert gpt2.bf16_s == pytest.approx(bf16) and gpt2.fp8_s == pytest.approx(best)
    assert gpt2.speedup == pytest.approx(bf16 / best) and 1 < gpt2.speedup < max(g.speedup for g in gpt2.winners)


def test_the_basis_names_the_peaks_the_bandwidth_and_their_datasheets(gpt2):
    b, spec = gpt2.basis, by_id(H100)
    assert (b.gpu_id, b.bf16_tflops, b.fp8_tflops, b.bandwidth_gbps) == (H100, spec.peak("bf16"), spec.peak("fp8"),
                                                                          spec.memory_bandwidth_gbps)
    assert b.peaks_source == spec.sources["peak_tflops"] and b.bandwidth_source == spec.sources["memory"]
    line = gpt2.lines()[-1]
    assert line.startswith("basis: NVIDIA H100 SXM5 80GB's dense peaks, bf16 989 and fp8 1,979 TFLOP/s")
    assert "whitepaper-hopper)" in line and "3,350 GB/s" in line and "perflab.numerics.speed" in line


def test_the_json_has_every_gemm_with_its_prediction_and_the_totals(gpt2):
    import json

    j = gpt2.to_json()
    assert json.loads(json.dumps(j)) == j
    assert list(j) == ["basis", "note", "gemms", "matmul_flops", "other_flops", "bf16_s", "fp8_s", "speedup"]
    g = j["gemms"][0]
    assert list(g) == ["m", "n", "k", "calls", "share", "flops", "bf16_s", "fp8_s", "cast_s", "speedup", "fp8_wins"]
    assert sum(x["fp8_wins"] for x in j["gemms"]) == 1 and j["basis"]["gpu_id"] == H100


CPU = DeviceInfo("cpu", "a test CPU")
H100_BOARD = DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", 0)
A100_BOARD = DeviceInfo("cuda", "NVIDIA A100-SXM4-80GB", 0)


@pytest.mark.parametrize("gpu, device, want, words", [
    (None, CPU, None, "the audit ran on a CPU, which has no fp8 units; name a GPU"),
    ("h100-sxm", CPU, "h100-sxm", "the GPU named; the audit ran on a CPU, which has no fp8 units"),
    (None, H100_BOARD, "h100-sxm", "the GPU the audit ran on"),
    ("h100-sxm", H100_BOARD, "h100-sxm", "the GPU named, the one the audit ran on"),
    ("h200-sxm", A100_BOARD, "h200-sxm", "the GPU named, not the NVIDIA A100-SXM4-80GB the audit ran on"),
    (None, A100_BOARD, None, "has no fp8 peak in perflab's table"),
    ("a100-sxm-80gb", CPU, None, "has no fp8 peak in perflab's table"),
    (None, DeviceInfo("cuda", "NVIDIA A10G", 0), None, "NVIDIA A10G is not in perflab's hardware table"),
])
def test_the_gpu_is_the_one_named_else_the_one_audited(gpu, device, want, words):
    spec, note = choose_gpu(gpu, device)
    assert (spec.id if spec else None) == want and words in note


def test_an_unknown_gpu_is_refused_naming_those_with_an_fp8_peak():
    with pytest.raises(InputError, match="not in perflab's hardware table: use one of .*h100-sxm"):
        gpu_spec("z80")
    assert gpu_spec("NVIDIA H100 80GB HBM3").id == H100  # the name torch reports works too


def test_without_a_gpu_only_the_shapes_are_listed():
    g = gains({(64, 32, 16): 3}, 2 * 64 * 32 * 16 * 4, None, "the audit ran on a CPU, which has no fp8 units")
    assert g.basis is None and g.gemms[0].prediction is None and g.gemms[0].share == pytest.approx(0.75)
    assert g.bf16_s is None and g.speedup is None and g.winners == [] and g.losers == []
    assert g.lines() == ["no prediction: the audit ran on a CPU, which has no fp8 units; the step ran 1 GEMM shape(s)"]
    assert g.to_json()["gemms"][0]["fp8_wins"] is None


def test_the_built_in_example_audited_for_an_h100():
    """lab 11's step (perflab's tiny GPT, smoke size): every GEMM is small, so none pays in fp8."""
    from perflab.audit import examples
    from perflab.audit.run import run_audit
    from perflab.audit.target import target_from

    rep = run_audit(target_from(examples.slow_data_step(smoke=True), "tiny GPT, slow DataLoader"), device="cpu",
                    steps=1, explain_breaks=False, gpu=H100)
    f = rep.fp8
    assert f is not None and f.basis is not None and f.gemms and f.winners == []
    assert all(g.prediction == predict(g.m, g.n, g.k, H100) for g in f.gemms)
    assert f.matmul_flops == rep.work.hardware_flops_per_step
    assert rep.to_json()["fp8_gemms"] == f.to_json()
    text = rep.summary()
    assert "fp8      where fp8 would pay on NVIDIA H100 SXM5 80GB" in text
    assert f"none of the step's {len(f.gemms)} GEMM shape(s) is predicted faster in fp8" in text


def test_a_cpu_step_with_no_gpu_named_predicts_nothing():
    from perflab.audit import examples
    from perflab.audit.run import fp8_step
    from perflab.workload.models import preset

    f = fp8_step(examples.model_step(preset("tiny-gpt"), 2, 16), device=torch.device("cpu"))
    assert f.basis is None and f.gemms and f.lines()[0].startswith("no prediction: the audit ran on a CPU")
