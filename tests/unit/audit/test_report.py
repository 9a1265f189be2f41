"""The audit as a typed report: its JSON made once, at the edge, with exactly the stable fields, and its
parts read by attribute (a made-up report: every figure chosen, no step run)."""

import json

import pytest

from perflab.audit.report import BREAKDOWN, JSON_FIELDS, Recommendation, Waterfall, as_mapping
from perflab.tune.waterfall import CATEGORIES

from .reports import FLOPS, FP8_FLOPS, made_up


def test_the_json_has_exactly_the_stable_fields_from_the_parts():
    rep = made_up()
    j = rep.to_json()
    assert tuple(j) == JSON_FIELDS and json.loads(json.dumps(j)) == j
    assert j["step_s"] == 0.1 and j["step_s_spread"] == 0.02 and j["tokens_per_s"] == pytest.approx(6.5e6)
    assert j["flops_per_step"] == FLOPS and j["flops_by_dtype"] == {"bf16": FLOPS + 1_000_000}
    assert j["flops_6n_per_step"] == 3_900_000_000 and j["flops_per_step_causal_halved"] == FLOPS - 500_000
    assert j["peak_tflops"] == pytest.approx(100.0) and j["mfu"] == pytest.approx(FLOPS / 1e14 / 0.1)
    assert j["mfu_basis"] == rep.utilization.basis_label() and j["mfu_bases"]["bf16"]["label"].startswith("bf16 spec")
    assert list(j["breakdown_s"]) == list(BREAKDOWN) and set(BREAKDOWN) == set(CATEGORIES)
    assert j["top_ops"][1] == {"name": "aten::copy_", "count": 9, "self_s": 0.001, "flops": None, "bytes": None,
                               "flops_per_s": None, "bytes_per_s": None, "bound": None}
    assert j["memory_bytes"] == {"weights": 4000, "grads": 4000, "optimizer": 8000, "activations": 2000,
                                 "peak": 20000, "estimate": None}
    assert j["graph_breaks"] == [{"file": "/x/model.py", "line": 12, "where": "model.py:12 in forward",
                                  "reason": "a .item() call", "hits": 2}]
    assert j["flops_uncounted"] == [{"name": "mylib::fused_mlp", "calls": 2, "time_s": 0.005}]
    assert [list(r) for r in j["recommendations"]] == [["rung", "why", "measured_speedup", "parity_ok"]] * 2
    f = j["fp8_gemms"]
    assert f["basis"]["gpu_id"] == "h100-sxm" and f["note"] == "the GPU named" and f["matmul_flops"] == FP8_FLOPS
    assert [(g["m"], g["n"], g["k"], g["calls"], g["fp8_wins"]) for g in f["gemms"]] == [
        (8192, 4096, 4096, 1, True), (1024, 1024, 1024, 3, False)]
    assert f["other_flops"] == 10**10 and f["speedup"] == pytest.approx(f["bf16_s"] / f["fp8_s"])
    assert rep.json == j and as_mapping(rep) == j and as_mapping(j) == j


def test_an_unknown_peak_is_null_and_said_in_words():
    from perflab.flops.mfu import Basis, utilization

    ceiling = Basis(tflops=0.1, kind="measured ceiling", dtype="fp32", what="a timed matmul", when="today",
                    shape=(8, 8, 8), version=1, statistic="fastest call")
    rep = made_up(utilization=utilization(0.1, {"fp32": 1e9}, {"fp32": ceiling}))
    assert rep.peak_tflops is None and rep.to_json()["peak_tflops"] is None
    assert "peak unknown" in rep.summary()


def test_the_waterfall_names_its_parts_as_lesson_11_labels_them():
    wf = made_up().waterfall
    assert wf.largest() == "data_wait" and wf.label("launch_overhead") == "launch overhead"
    assert [k for k, _ in wf.by_size()] == ["data_wait", "compute", "optimizer", "launch_overhead", "host_sync"]
    assert Waterfall({"data_wait": 0.0, "compute": 0.0}).by_size()[0][0] == "data_wait"  # ties keep their order


def test_the_summary_reads_every_part():
    text = made_up().summary()
    assert text.startswith("audit of made-up step on cpu: a test machine")
    assert "step 100 ms (median; spread IQR/median 2.0 %), 6.50e+06 tokens/s, 80.0 samples/s" in text
    assert "not counted: mylib::fused_mlp, 2 call(s), 5.00 ms (5.00 % of the step)" in text
    assert "with causal attention halved" in text and "6N·tokens = 3.90e+09" in text
    assert "MFU      0.0400 %   HFU 0.0400 %   (100 TFLOP/s; basis: bf16 spec peak 100 TFLOP/s" in text
    assert "where    data wait 40.0 ms (40.0 %), compute 30.0 ms (30.0 %)" in text
    assert "launch overhead 10.0 ms" in text and "largest share: data wait" in text
    assert "aten::copy_, 9, 1.00 ms, –, –, –" in text
    assert "compiler 1 graph break site(s)" in text and "model.py:12 in forward: a .item() call" in text
    assert "energy   energy not measurable: no meter here" in text
    assert "1. loader: the step waits for data" in text and "note     a note" in text
    assert "fp8      where fp8 would pay on NVIDIA H100 SXM5 80GB (the GPU named)" in text
    assert "         1 of 2 GEMM shapes predicted faster in fp8, 94.4 % of the step's matmul FLOPs" in text
    assert "           8192×4096×4096, 1, 94.4 %, 278 µs → 214 µs, 1.30×" in text
    assert "the closest, 1024×1024×1024, at 0.495×" in text and "         basis: NVIDIA H100 SXM5 80GB's" in text
    assert "the step's matmuls in all: 294 µs in bf16 → 231 µs with fp8 where it wins, 1.28×" in text


def test_a_report_without_the_fp8_section_says_nothing_of_it():
    rep = made_up(fp8=None)
    assert rep.to_json()["fp8_gemms"] is None and "fp8      " not in rep.summary()


def test_a_recommendation_tried_carries_its_verdict_and_quietness():
    from perflab.core.quietness import Quietness

    q = Quietness("quiet", 0.0, 1.0, 2, 0.0, 1, "")
    r = Recommendation("adamw", "why", 0.01, 1.2, True, q, "keep it")
    assert r.to_json() == {"rung": "adamw", "why": "why", "measured_speedup": 1.2, "parity_ok": True,
                           "quietness": q.to_json(), "verdict": "keep it"}
