"""`perflab.audit.run_audit` on outside models and planted faults: FLOPs against independent counts,
the MFU basis, the breakdown and the graph breaks."""

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
    assert tuple(gpt2.json) == JSON_FIELDS
    assert set(gpt2.json["breakdown_s"]) == {"data_wait", "host_sync", "launch", "optimizer", "compute"}
    assert set(gpt2.json["memory_bytes"]) == {"weights", "grads", "optimizer", "activations", "peak", "estimate"}
    for op in gpt2.json["top_ops"]:
        assert {"name", "count", "self_s", "flops", "bytes", "flops_per_s", "bytes_per_s", "bound"} <= set(op)


def test_gpt2_flops_equal_an_independent_count(gpt2):
    """Per layer: QKV 2·T·d·3d, projection 2·T·d², MLP 2·2·T·d·4d, attention 2·2·b·s²·d (dense);
    logits 2·T·d·V; backward twice the forward (every product's inputs need gradients)."""
    c, b, s = F.GPT2, F.BATCH, F.SEQ
    d, L, V, T = c["n_embd"], c["n_layer"], c["vocab_size"], b * s
    fwd = L * (24 * T * d * d + 4 * b * s * s * d) + 2 * T * d * V
    assert gpt2.json["flops_per_step"] == pytest.approx(3 * fwd, rel=0.01)
    assert gpt2.json["flops_6n_per_step"] == 6 * gpt2.json["params_total"] * T


def test_llama_gqa_flops_equal_an_independent_count(llama):
    c, b, s = F.LLAMA_GQA, F.BATCH, F.SEQ
    d, L, V, ffn = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["intermediate_size"]
    hq, kv = c["num_attention_heads"], c["num_key_value_heads"]
    dh, T = d // hq, b * s
    fwd = L * (2 * 2 * T * d * d + 2 * 2 * T * d * kv * dh + 3 * 2 * T * d * ffn + 4 * b * hq * s * s * dh) + 2 * T * d * V
    assert llama.json["flops_per_step"] == pytest.approx(3 * fwd, rel=0.01)


def test_moe_counts_active_parameters_and_the_flops_of_top_k_routing(mixtral):
    c, b, s = F.MIXTRAL, F.BATCH, F.SEQ
    d, L, V, ffn = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["intermediate_size"]
    hq, kv, E, k = c["num_attention_heads"], c["num_key_value_heads"], c["num_local_experts"], c["num_experts_per_tok"]
    dh, T = d // hq, b * s
    expert = 3 * d * ffn  # gate, up and down matrices of one expert
    j = mixtral.json
    assert j["params_total"] - j["params_active"] == L * (E - k) * expert
    # each token visits k experts: 2·T·k·3·d·ffn per layer, not E
    fwd = L * (2 * 2 * T * d * d + 2 * 2 * T * d * kv * dh + 2 * T * d * E + 2 * T * k * expert
               + 4 * b * hq * s * s * dh) + 2 * T * d * V
    assert j["flops_per_step"] == pytest.approx(3 * fwd, rel=0.01)
    assert j["flops_6n_per_step"] == 6 * j["params_active"] * T


def test_an_unknown_device_gets_no_borrowed_peak(gpt2):
    j = gpt2.json
    assert j["peak_tflops"] is None
    assert "peak unknown" in j["mfu_basis"] and "measured" in j["mfu_basis"]
    assert 0 < j["mfu"] <= j["hfu"] < 1
    assert set(j["flops_by_dtype"]) == {"fp32"}


def test_memory_parts_and_lesson_03_estimate(gpt2):
    m = gpt2.json["memory_bytes"]
    params = gpt2.json["params_total"]
    assert m["weights"] >= 4 * params and m["grads"] == 4 * params and m["optimizer"] >= 8 * params
    assert m["peak"] >= m["weights"] + m["optimizer"] and m["estimate"] and m["activations"] > 0


def test_gpt2_recommendations_are_rungs_ordered_by_what_they_can_save(gpt2):
    from perflab.tune.ladder import RUNG_NAMES

    recs = gpt2.json["recommendations"]
    assert recs and all(r["rung"] in RUNG_NAMES for r in recs)
    assert "vocab64" in [r["rung"] for r in recs]  # vocabulary 100
    assert all(r["measured_speedup"] is None and r["parity_ok"] is None for r in recs)
    assert "summary" and "MFU" in gpt2.summary()


def test_a_conv_net_has_no_tokens_and_its_convolutions_counted():
    from perflab.flops.counting import conv2d_flops, linear_flops

    rep = audit(target_from(F.convnet(), "convnet"))
    j = rep.json
    assert j["tokens_per_s"] is None and j["flops_6n_per_step"] is None
    fwd = conv2d_flops(4, 3, 8, 16, 16, 3, padding=1) + conv2d_flops(4, 8, 8, 16, 16, 3, padding=1) + linear_flops(4, 8, 10)
    # the first convolution's input (the data) needs no gradient: its backward is the weight gradient only
    first = conv2d_flops(4, 3, 8, 16, 16, 3, padding=1)
    assert j["flops_per_step"] == pytest.approx(3 * fwd - first, rel=0.01)
    assert rep.samples_per_s and rep.samples_per_s > 0


def test_a_slow_dataloader_shows_as_data_wait():
    j = audit(target_from(F.slow_loader(), "slow_loader")).json
    bd = j["breakdown_s"]
    assert max(bd, key=bd.get) == "data_wait"
    assert "loader" in [r["rung"] for r in j["recommendations"]]


def test_item_in_forward_is_a_host_sync_and_a_graph_break():
    rep = audit(target_from(F.item_in_forward(), "item_in_forward"), explain_breaks=True)
    j = rep.json
    assert j["breakdown_s"]["host_sync"] > 0
    assert j["graph_breaks"], "dynamo breaks the graph at .item()"
    b = j["graph_breaks"][0]
    assert b["file"].endswith("factories.py") and isinstance(b["line"], int) and b["reason"]


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
