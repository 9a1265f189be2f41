"""Tests of `perflab.flops.step`."""

from __future__ import annotations

import gc

import pytest
import torch

from perflab.core.errors import InputError
from perflab.flops import step
from perflab.flops.step import PythonGarbage, gc_straggler_series, grad_accum_sweep, measure_step
from perflab.flops.transformer import exact_flops
from perflab.workload.models import preset

TINY = preset("tiny-gpt").with_(layers=1, hidden=32, heads=2, ffn=64, vocab=64, seq_len=16)


def test_a_training_step_refuses_other_dtypes():
    with pytest.raises(InputError, match="^training steps run in fp32, bf16 or fp16, not fp64$"):
        step.measure_step(TINY, dtype="fp64", device="cpu")


def test_a_step_whose_attention_runs_unfused_says_so():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH]):
        r = step.measure_step(TINY, batch=2, steps=1, warmup=1, ceiling=False, device="cpu")
    assert r.notes == ["attention ran an unfused kernel here (no recomputed scores in its backward)"]
    assert r.counted_flops_per_step == r.hardware_flops_per_step == r.model_flops_per_step


def test_checkpointing_comparison_measures_the_step_without_then_with():
    off, on = step.checkpointing_comparison(TINY, batch=2, steps=1, warmup=0, ceiling=False, verify=False, device="cpu")
    assert (off.checkpointing, on.checkpointing) == (False, True)
    assert on.model_flops_per_step == off.model_flops_per_step
    assert on.hardware_flops_per_step > off.hardware_flops_per_step  # the recomputed forward


@pytest.mark.parametrize("checkpointing", [False, True])
def test_measure_step(checkpointing):
    cfg = preset("tiny-llama")
    r = measure_step(cfg, batch=2, seq=32, steps=2, warmup=1, checkpointing=checkpointing, device="cpu", ceiling=0.5)
    ex = exact_flops(cfg, 2, 32, checkpointing=checkpointing)
    assert r.counted_flops_per_step == ex.hardware == r.hardware_flops_per_step
    assert r.model_flops_per_step == ex.model
    assert r.tokens_per_s == pytest.approx(64 / r.step_s)
    assert r.model_tflops == pytest.approx(ex.model / r.step_s / 1e12)
    assert r.hfu_ceiling > r.mfu_ceiling and r.mfu_ceiling == pytest.approx(r.model_tflops / 0.5)
    if r.peak_tflops:
        assert r.mfu_spec == pytest.approx(r.model_tflops / r.peak_tflops)
    assert len(r.step_times_s) == 2 and r.loss is not None
    assert r.dtype == "fp32" and "MFU" in str(r)


def test_grad_accum_sweep(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    res = grad_accum_sweep(preset("tiny-gpt"), [1, 2], batch=2, seq=16, steps=2, device="cpu", ceiling=False)
    df = res.ok_frame()
    assert list(df["gas"]) == [1, 2] and (df["tokens_per_s"] > 0).all()
    assert list(df["tokens_per_step"]) == [32, 64]
    again = grad_accum_sweep(preset("tiny-gpt"), [1, 2], batch=2, seq=16, steps=2, device="cpu", ceiling=False)
    assert list(again.ok_frame()["tokens_per_s"]) == list(df["tokens_per_s"])  # resumed, not re-measured


@pytest.mark.slow
def test_gc_series_collections_where_expected():
    """With gc on, Python decides when to collect (a full, generation-2 collection happens once enough
    objects have aged); with gc.disable() the only collections are the scheduled ones."""
    was = gc.isenabled()
    # Python runs a full collection only when the objects aged since the last one pass a quarter of the
    # long-lived heap: in a test worker that has imported half of PyPI that heap is millions of objects,
    # and this small series would never get there. Frozen, the worker's own objects no longer count.
    gc.freeze()
    try:
        on, off = gc_straggler_series(preset("tiny-gpt"), steps=12, collect_every=5, batch=1, seq=8,
                                      garbage=PythonGarbage(heap=2_000, per_step=20_000, keep=10_000))
    finally:
        gc.unfreeze()
    assert gc.isenabled() == was
    assert len(on.step_s) == len(off.step_s) == 12
    assert any(g == 2 for _, g, _ in on.collections)
    assert off.collections and all(g == 2 and (s + 1) % 5 == 0 for s, g, _ in off.collections)
    assert {s for s, _, _ in off.collections} == {4, 9}


@pytest.mark.gpu
def test_measure_step_cuda_bf16():
    r = measure_step(preset("small-llama"), batch=8, seq=256, steps=5, device="cuda")
    assert r.dtype == "bf16" and r.counted_flops_per_step == r.hardware_flops_per_step
    assert r.peak_tflops and 0 < r.mfu_spec < 1 and 0 < r.mfu_ceiling < 1.2


def test_the_step_panel_refuses_a_step_it_cannot_measure_in_its_budget(monkeypatch):
    # gpt2-small at batch 64 × 1024 tokens is ~57 TFLOP per step: minutes on a laptop CPU. The panel
    # predicts it from the exact FLOP count at a matmul's measured rate and says what fits instead.
    from perflab.core.errors import InputError
    from perflab.flops import plots as fplots
    from perflab.flops.step import predicted_step_s
    from perflab.workload.models import preset

    with pytest.raises(InputError, match=r"gpt2-small at batch 64 × seq 1024 is .* TFLOP per step.*choose"
                                         r".*perflab mfu --measure --preset gpt2-small --batch 64 --seq 1024"):
        fplots.step_dashboard("gpt2-small", 1024, 64, device="cpu", budget_s=10.0)
    monkeypatch.setattr(fplots, "_STEP_OVER_MATMUL", {})  # no step measured yet in this process
    s, rate, flops = predicted_step_s(preset("tiny-gpt"), 8, 64, False, torch.device("cpu"), "fp32")
    assert flops > 0 and rate > 0 and s == pytest.approx(flops / (rate * 1e12))
    with pytest.raises(InputError, match=r"choose batch ≤ 4\b"):  # half the time of 1 + 3 steps: half the batch
        fplots.step_dashboard("tiny-gpt", 64, 8, device="cpu", steps=3, budget_s=s * 4 * 0.5 * 1.001)


def test_steps_side_by_side_read_as_a_person_reads_them():
    r = step.measure_step(TINY, batch=2, steps=1, warmup=0, ceiling=0.05, device="cpu")
    df = step.steps_frame([r, r], ["a", "b"])
    assert list(df.index) == ["a", "b"]
    assert list(df.columns) == ["step (ms)", "tokens/s", "model TFLOP/s", "MFU, peak", "HFU, peak", "MFU, ceiling",
                                "HFU, ceiling"]
    row = df.loc["a"]
    assert row["MFU, ceiling"].endswith("%") and float(row["step (ms)"].replace(",", "")) > 0
    assert "None" not in df.to_string() and "nan" not in df.to_string()
