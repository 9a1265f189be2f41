"""The training-step runner, the measured step's utilization, gradient accumulation and the GC lesson."""

import gc

import pytest
import torch

from perflab.core.errors import InputError
from perflab.flops.step import PythonGarbage, gc_straggler_series, grad_accum_sweep, measure_step
from perflab.flops.transformer import exact_flops
from perflab.workload.models import build_model, preset
from perflab.workload.train import StepRunner, make_batches


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


def test_hooks_and_phases():
    cfg = preset("tiny-gpt")
    seen = []
    r = StepRunner(build_model(cfg), hooks={"before_step": [lambda run, i: seen.append(("b", i))],
                                            "after_step": [lambda run, i: seen.append(("a", i))]})
    times = r.run(make_batches(cfg, 2, 16, n=2), steps=2, warmup=1)
    assert len(times) == 2 and seen == [("b", 0), ("a", 0), ("b", 1), ("a", 1), ("b", 2), ("a", 2)]
    t = times[0]
    assert t.tokens == 32 and min(t.forward_s, t.backward_s, t.optimizer_s) > 0
    assert t.forward_s + t.backward_s + t.optimizer_s <= t.step_s * 1.05
    with pytest.raises(InputError):
        r.step(make_batches(cfg, 2, 16, n=2))  # grad_accum=1 takes one micro-batch


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


def test_checkpointing_costs_time_in_backward():
    """Recomputation happens in the backward: its time grows with checkpointing. Timings are noisy on
    a shared machine, so the two models' steps are interleaved and the comparison is retried."""
    import statistics

    cfg = preset("tiny-gpt")
    batches = make_batches(cfg, 8, 128, n=2)
    runners = {}
    for ck in (False, True):
        m = build_model(cfg)
        m.checkpointing = ck
        runners[ck] = StepRunner(m)
        runners[ck].run(batches, 1, warmup=1)
    for _ in range(3):
        bw = {False: [], True: []}
        for i in range(6):
            for ck in (False, True):
                bw[ck].append(runners[ck].step([batches[i % 2]]).backward_s)
        if statistics.median(bw[True]) > statistics.median(bw[False]):
            break
    assert statistics.median(bw[True]) > statistics.median(bw[False]), bw
    a, b = exact_flops(cfg, 8, 128), exact_flops(cfg, 8, 128, checkpointing=True)
    assert b.hardware > a.hardware and b.model == a.model


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


def test_bad_sizes():
    with pytest.raises(InputError, match="context"):
        make_batches(preset("tiny-gpt"), 2, 4096)
    with pytest.raises(InputError):
        measure_step(preset("tiny-gpt"), batch=0, seq=16, device="cpu")


@pytest.mark.gpu
def test_measure_step_cuda_bf16():
    r = measure_step(preset("small-llama"), batch=8, seq=256, steps=5, device="cuda")
    assert r.dtype == "bf16" and r.counted_flops_per_step == r.hardware_flops_per_step
    assert r.peak_tflops and 0 < r.mfu_spec < 1 and 0 < r.mfu_ceiling < 1.2


def test_grad_accum_prediction():
    import pandas as pd

    from perflab.flops.plots import grad_accum_prediction

    df = pd.DataFrame({"gas": [1, 2, 4], "tokens_per_step": [100, 200, 400], "step_s": [1.0, 1.9, 3.7],
                       "optimizer_s": [0.2, 0.2, 0.2]})
    pred = grad_accum_prediction(df)
    assert pred[0] == pytest.approx(100.0)  # the GAS = 1 point itself
    assert pred[1] == pytest.approx(100 / (0.8 + 0.1)) and pred[2] == pytest.approx(100 / (0.8 + 0.05))


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
