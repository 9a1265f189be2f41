"""`perflab.audit.run_audit` on outside models and planted faults: FLOPs against independent counts,
the MFU basis, the breakdown and the graph breaks, read from the typed report (`perflab.audit.report`)."""

import json

import pytest
import torch

pytest.importorskip("transformers")

from perflab.audit.run import JSON_FIELDS, run_audit  # noqa: E402
from perflab.audit.target import from_hf_config, target_from  # noqa: E402

from . import factories as F  # noqa: E402


def audit(target, **kw):
    kw.setdefault("steps", 2)
    kw.setdefault("explain_breaks", False)
    return run_audit(target, device="cpu", **kw)


@pytest.fixture(scope="module")
def gpt2():
    return audit(from_hf_config("gpt2", F.GPT2, batch=F.BATCH, seq=F.SEQ), explain_breaks=True)


@pytest.fixture(scope="module")
def llama():
    return audit(from_hf_config("llama", F.LLAMA_GQA, batch=F.BATCH, seq=F.SEQ))


@pytest.fixture(scope="module")
def mixtral():
    return audit(from_hf_config("mixtral", F.MIXTRAL, batch=F.BATCH, seq=F.SEQ))


def test_json_has_exactly_the_stable_fields(gpt2):
    from perflab.tune.waterfall import CATEGORIES

    j = gpt2.to_json()
    assert tuple(j) == JSON_FIELDS
    assert set(j["breakdown_s"]) == set(CATEGORIES)  # lesson 11's names: launch_overhead, not launch
    assert sum(j["breakdown_s"].values()) == pytest.approx(j["step_s"])
    assert set(j["memory_bytes"]) == {"weights", "grads", "optimizer", "activations", "peak", "estimate"}
    for op in j["top_ops"]:
        assert {"name", "count", "self_s", "flops", "bytes", "flops_per_s", "bytes_per_s", "bound"} <= set(op)
    assert json.loads(json.dumps(j)) == j  # JSON-ready as it is


def test_gpt2_flops_equal_an_independent_count(gpt2):
    """Per layer: QKV 2·T·d·3d, projection 2·T·d², MLP 2·2·T·d·4d, attention 2·2·b·s²·d (dense);
    logits 2·T·d·V; backward twice the forward (every product's inputs need gradients)."""
    c, b, s = F.GPT2, F.BATCH, F.SEQ
    d, L, V, T = c["n_embd"], c["n_layer"], c["vocab_size"], b * s
    fwd = L * (24 * T * d * d + 4 * b * s * s * d) + 2 * T * d * V
    assert gpt2.work.flops_per_step == pytest.approx(3 * fwd, rel=0.01)
    assert gpt2.work.six_n == 6 * gpt2.work.params_total * T


def test_llama_gqa_flops_equal_an_independent_count(llama):
    c, b, s = F.LLAMA_GQA, F.BATCH, F.SEQ
    d, L, V, ffn = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["intermediate_size"]
    hq, kv = c["num_attention_heads"], c["num_key_value_heads"]
    dh, T = d // hq, b * s
    fwd = L * (2 * 2 * T * d * d + 2 * 2 * T * d * kv * dh + 3 * 2 * T * d * ffn + 4 * b * hq * s * s * dh) + 2 * T * d * V
    assert llama.work.flops_per_step == pytest.approx(3 * fwd, rel=0.01)


def test_moe_counts_active_parameters_and_the_flops_of_top_k_routing(mixtral):
    c, b, s = F.MIXTRAL, F.BATCH, F.SEQ
    d, L, V, ffn = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["intermediate_size"]
    hq, kv, E, k = c["num_attention_heads"], c["num_key_value_heads"], c["num_local_experts"], c["num_experts_per_tok"]
    dh, T = d // hq, b * s
    expert = 3 * d * ffn  # gate, up and down matrices of one expert
    w = mixtral.work
    assert w.params_total - w.params_active == L * (E - k) * expert
    # each token visits k experts: 2·T·k·3·d·ffn per layer, not E
    fwd = L * (2 * 2 * T * d * d + 2 * 2 * T * d * kv * dh + 2 * T * d * E + 2 * T * k * expert
               + 4 * b * hq * s * s * dh) + 2 * T * d * V
    assert w.flops_per_step == pytest.approx(3 * fwd, rel=0.01)
    assert w.six_n == 6 * w.params_active * T


def test_an_unknown_device_gets_no_borrowed_peak(gpt2):
    u = gpt2.utilization
    assert gpt2.peak_tflops is None
    assert "peak unknown" in u.basis_label() and "measured" in u.basis_label()
    assert 0 < u.mfu <= u.hfu < 1
    assert set(gpt2.work.flops_by_dtype) == {"fp32"}


def test_memory_parts_and_lesson_03_estimate(gpt2):
    m = gpt2.memory
    params = gpt2.work.params_total
    assert m.weights >= 4 * params and m.grads == 4 * params and m.optimizer >= 8 * params
    assert m.peak >= m.weights + m.optimizer and m.estimate and m.activations > 0


def test_gpt2_recommendations_are_rungs_ordered_by_what_they_can_save(gpt2):
    from perflab.tune.ladder import RUNG_NAMES

    recs = gpt2.recommendations
    assert recs and all(r.rung in RUNG_NAMES for r in recs)
    assert "vocab64" in [r.rung for r in recs]  # vocabulary 100
    assert [r.can_save_s for r in recs] == sorted((r.can_save_s for r in recs), reverse=True)
    assert all(r.measured_speedup is None and r.parity_ok is None for r in recs)
    assert "MFU" in gpt2.summary()


def test_a_conv_net_has_no_tokens_and_its_convolutions_counted():
    from perflab.flops.counting import conv2d_flops, linear_flops

    rep = audit(target_from(F.convnet(), "convnet"))
    assert rep.time.tokens_per_s is None and rep.work.six_n is None
    fwd = conv2d_flops(4, 3, 8, 16, 16, 3, padding=1) + conv2d_flops(4, 8, 8, 16, 16, 3, padding=1) + linear_flops(4, 8, 10)
    # the first convolution's input (the data) needs no gradient: its backward is the weight gradient only
    first = conv2d_flops(4, 3, 8, 16, 16, 3, padding=1)
    assert rep.work.flops_per_step == pytest.approx(3 * fwd - first, rel=0.01)
    assert rep.time.samples_per_s and rep.time.samples_per_s > 0


def test_a_slow_dataloader_shows_as_data_wait():
    rep = audit(target_from(F.slow_loader(), "slow_loader"))
    assert rep.waterfall.largest() == "data_wait"
    assert "loader" in [r.rung for r in rep.recommendations]
    assert "largest share: data wait" in rep.summary()


def test_item_in_forward_is_a_host_sync_and_a_graph_break():
    rep = audit(target_from(F.item_in_forward(), "item_in_forward"), explain_breaks=True)
    assert rep.waterfall.seconds["host_sync"] > 0
    assert rep.breaks.read and rep.breaks.sites, "dynamo breaks the graph at .item()"
    b = rep.breaks.sites[0]
    assert b.file.endswith("factories.py") and isinstance(b.line, int) and b.reason


def test_dtype_of_autocast_products_is_counted_per_dtype():
    from perflab.flops.counter import count_flops

    lin = torch.nn.Linear(32, 32)
    x = torch.randn(8, 32)

    def f():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = lin(x)
        (y.float() @ torch.randn(32, 4)).sum().backward()

    fc = count_flops(f)
    assert set(fc.hardware_by_dtype()) == {"bf16", "fp32"}
    assert fc.hardware_by_dtype()["bf16"] == 2 * 8 * 32 * 32 * 2  # forward + weight gradient


# ---------------------------------------------------------------- outside architectures

def test_a_depthwise_convolution_is_counted_once_per_group():
    from perflab.flops.counting import conv2d_flops, linear_flops

    w = audit(target_from(F.depthwise(), "depthwise")).work
    n, hw = 4, 16
    first = conv2d_flops(n, 3, 16, hw, hw, 3, padding=1)
    dw = conv2d_flops(n, 16, 16, hw, hw, 3, padding=1, groups=16)
    pw = conv2d_flops(n, 16, 32, hw, hw, 1)
    fwd = first + dw + pw + linear_flops(n, 32, 10)
    # backward: input and weight gradients, twice the forward, except the first layer (data needs no gradient)
    assert w.flops_per_step == 3 * fwd - first
    assert w.uncounted == []


def test_an_lstm_is_counted():
    t, b, i, h = 10, 4, 12, 24
    rep = audit(target_from(F.lstm(), "lstm"))
    lstm_fwd = 2 * t * b * 4 * h * (i + h) + 2 * t * b * 4 * h * (h + h)
    head_fwd = 2 * t * b * h * 5
    assert rep.work.flops_per_step == 3 * (lstm_fwd + head_fwd)
    assert rep.work.uncounted == []


def test_an_op_without_a_formula_is_named_with_its_calls_and_time():
    """A library's own kernel (a custom op): its products are missing from the count, so it is named,
    with its calls (forward, and the two products of its backward) and time, never filed under 'the rest'."""
    rep = audit(target_from(F.custom_kernel(), "custom_kernel"))
    (u,) = rep.work.uncounted
    assert u.name == "perflab_audit_test::opaque_mm" and u.calls == 3 and u.time_s and u.time_s > 0
    assert rep.to_json()["flops_uncounted"] == [{"name": u.name, "calls": 3, "time_s": u.time_s}]
    assert "not counted: perflab_audit_test::opaque_mm, 3 call(s)" in rep.summary()


def test_uint8_images_are_samples_not_tokens():
    rep = audit(target_from(F.uint8_images(), "uint8_images"))
    assert rep.time.tokens_per_s is None and rep.work.six_n is None
    assert rep.time.samples_per_s and "tokens/s n/a" in rep.summary()


def test_token_ids_are_index_tensors_of_batch_by_sequence():
    from perflab.audit.target import tokens_in

    ids = torch.randint(0, 50, (2, 8))
    assert tokens_in((ids, ids)) == 16 and tokens_in((ids.int(), ids)) == 16
    assert tokens_in((ids.to(torch.uint8), ids)) is None and tokens_in((ids.bool(), ids)) is None
    assert tokens_in((torch.randint(0, 50, (2, 3, 4, 4)), ids)) is None  # 4-D: an image, not a sequence


def test_an_encoder_decoder_counts_both_streams():
    """BART: its encoder's parameters work on the 2·16 encoder tokens, the decoder's (and the shared
    embedding, tied to the output head) on the 2·8 decoder tokens."""
    built = F.bart()
    model = built["model"]
    rep = audit(target_from(built, "bart"))
    names = dict(model.named_parameters())  # each tied tensor once, under its first name (model.shared)
    n_enc = sum(p.numel() for n, p in names.items() if n.startswith("model.encoder."))
    n_dec = sum(p.numel() for p in names.values()) - n_enc
    t_enc, t_dec = F.BATCH * F.ENC_SEQ, F.BATCH * F.DEC_SEQ
    assert rep.work.six_n == 6 * (n_enc * t_enc + n_dec * t_dec)
    assert rep.time.tokens_per_s == pytest.approx((t_enc + t_dec) / rep.time.step_s)
    rest = rep.work.gap[-1]
    assert rest.what.startswith("the rest") and "cross-attention" in rest.what
    # what is left is biases, norms and the cross-attention's keys and values: a few percent, not the
    # decoder's whole stream (which was 72 % of the count when only the encoder's tokens were counted)
    assert abs(rest.flops) < 0.05 * rep.work.flops_per_step
    assert "T_dec = 16 decoder tokens" in rep.summary()


def test_a_float64_model_is_named_as_a_cause_with_its_cost():
    rep = audit(target_from(F.float64(), "float64"))
    assert list(rep.work.flops_by_dtype) == ["fp64"]
    assert len(rep.causes) == 1 and rep.causes[0].startswith("float64: 100% of the step's matmul-class FLOPs")
    assert "fp32's" in rep.causes[0] and "cause    float64" in rep.summary()


def test_causal_attention_is_printed_in_both_conventions(gpt2):
    w = gpt2.work
    # HF GPT-2 runs SDPA with is_causal=True: the halved convention leaves out half of its score products
    c, b, s = F.GPT2, F.BATCH, F.SEQ
    attn = 3 * c["n_layer"] * 4 * b * s * s * c["n_embd"]  # forward + backward, dense
    assert w.flops_per_step - w.flops_causal_halved == attn // 2
    text = gpt2.summary()
    assert "FlashAttention's benchmark" in text and "MFU included, uses the dense count" in text
