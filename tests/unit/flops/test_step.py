"""Tests of `perflab.flops.step`."""

from __future__ import annotations

import gc
from dataclasses import replace

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


def test_the_step_panel_refuses_a_step_it_cannot_measure_in_its_budget():
    # gpt2-small at batch 64 × 1024 tokens is ~57 TFLOP per step: minutes on a laptop CPU. The panel
    # predicts it from the exact FLOP count at a matmul's measured rate and says what fits instead.
    from perflab.core.errors import InputError
    from perflab.flops import plots as fplots
    from perflab.flops.step import predicted_step_s
    from perflab.workload.models import preset

    with pytest.raises(InputError, match=r"gpt2-small at batch 64 × seq 1024 is .* TFLOP per step.*choose"
                                         r".*perflab mfu --measure --preset gpt2-small --batch 64 --seq 1024"):
        fplots.step_dashboard("gpt2-small", 1024, 64, device="cpu", budget_s=10.0)
    fplots.forget_measured_steps()  # as if no step had been measured yet in this process
    s, rate, flops = predicted_step_s(preset("tiny-gpt"), 8, 64, False, torch.device("cpu"), "fp32")
    assert flops > 0 and rate > 0 and s == pytest.approx(flops / (rate * 1e12))
    with pytest.raises(InputError, match=r"choose batch ≤ 4\b"):  # half the time of 1 + 3 steps: half the batch
        fplots.step_dashboard("tiny-gpt", 64, 8, device="cpu", steps=3, budget_s=s * 4 * 0.5 * 1.001)


def test_steps_side_by_side_read_as_a_person_reads_them():
    r = step.measure_step(TINY, batch=2, steps=1, warmup=0, ceiling=0.05, device="cpu")
    df = step.steps_frame([r, r], ["a", "b"])
    assert list(df.index) == ["a", "b"]
    assert list(df.columns) == ["step (ms)", "tokens/s", "model TFLOP/s", "MFU, peak", "HFU, peak", "MFU, ceiling",
                                "HFU, ceiling", "machine while measured"]
    row = df.loc["a"]
    assert row["MFU, ceiling"].endswith("%") and float(row["step (ms)"].replace(",", "")) > 0
    assert "None" not in df.to_string() and "nan" not in df.to_string()


def _busy_basis(share: float = 0.6):
    from perflab.core.quietness import Quietness
    from perflab.flops.basis import Basis

    q = Quietness("disturbed", share, 1.0, 2, 1.2, 2, f"other programs used {share:.0%} of 2 cores".replace("%", " %"))
    return Basis(0.05, "measured ceiling", "fp32", "fastest of 3 timed 64×64×64 fp32 matmuls", "2026-11-27 17:00",
                 (64, 64, 64), None, "measured while the machine was busy (...)", None, "fastest call", q)


def test_no_mfu_against_a_ceiling_measured_on_a_busy_machine():
    """A ceiling that was not stored because other programs used the machine says nothing: the step's MFU and
    HFU against it are withheld and called inconclusive, the ones against the peak stay."""
    busy = _busy_basis()
    assert step.ceiling_inconclusive(busy) == ("inconclusive: the machine was busy (while its ceiling was measured: "
                                               "other programs used 60 % of 2 cores)")
    r = step.measure_step(TINY, batch=2, steps=1, warmup=0, ceiling=busy, verify=False, device="cpu")
    assert r.mfu_ceiling is None and r.hfu_ceiling is None and r.ceiling_verdict == step.ceiling_inconclusive(busy)
    assert "MFU and HFU against the measured ceiling inconclusive: the machine was busy" in str(r)
    row = step.steps_frame([r], ["a"]).loc["a"]
    assert row["MFU, ceiling"] == row["HFU, ceiling"] == "inconclusive (busy)"
    assert "ceiling measured on a busy machine" in __import__("perflab.flops.mfu", fromlist=["x"]).describe_report(r)["peak"]
    quiet = step.measure_step(TINY, batch=2, steps=1, warmup=0, ceiling=0.05, verify=False, device="cpu")
    assert quiet.ceiling_verdict is None and quiet.mfu_ceiling is not None
    stored = replace(busy, version=1, questioned=None)  # stored ceilings passed the one rule: they stand
    assert step.ceiling_inconclusive(stored) is None and step.ceiling_inconclusive(None) is None


def test_every_step_of_a_pair_divides_by_the_one_basis_it_was_given():
    busy = _busy_basis()
    pair = step.checkpointing_comparison(TINY, batch=2, steps=1, warmup=0, ceiling=busy, verify=False, device="cpu")
    plain, ckpt = pair
    assert pair.basis is busy and plain.ceiling_label == ckpt.ceiling_label == busy.label()
    assert plain.ceiling_verdict and ckpt.ceiling_verdict
    assert "MFU against this ceiling: inconclusive: the machine was busy" in pair.text("a peak")
    assert list(pair.table().index) == ["no checkpointing", "checkpointing"]
    summary = dict(zip(pair.summary()["quantity"], pair.summary()["value"]))
    assert summary["MFU vs measured ceiling"].startswith("inconclusive: the machine was busy")
    assert "machine while the steps ran" in summary


@pytest.mark.usefixtures("watch_all_cores")
def test_a_pair_measures_its_basis_once_and_a_busy_one_is_inconclusive(tmp_path, monkeypatch):
    """With made-up load the ceiling is not stored, so every call would measure it again: the pair takes it once."""
    import itertools

    from perflab.core.quietness import MadeUpLoad, injected

    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    seconds = itertools.count()  # every reading of the made-up clock a second later: no window too short to judge
    with injected(MadeUpLoad(0.6, clock=lambda: float(next(seconds)))):
        pair = step.checkpointing_comparison(TINY, batch=2, steps=1, warmup=0, ceiling_size=256, verify=False,
                                             device="cpu")
    plain, ckpt = pair
    assert pair.basis is not None and not pair.basis.stored and pair.basis.quietness.disturbed
    assert plain.ceiling_label == ckpt.ceiling_label == pair.basis.label()
    assert plain.ceiling_verdict == ckpt.ceiling_verdict == step.ceiling_inconclusive(pair.basis)
    assert plain.disturbed and pair.headline() is None  # a busy step's MFU judges no prediction
    assert "inconclusive: the machine was busy" in pair.text()


def test_a_quiet_pair_reveals_its_mfu_against_the_peak(tmp_path, monkeypatch):
    from perflab.core.quietness import Quietness

    r = step.measure_step(TINY, batch=2, steps=1, warmup=0, ceiling=0.05, verify=False, device="cpu")
    quiet = replace(r, quietness=Quietness("quiet", 0.0, 1.0, 2, 0.0, 2, ""))
    pair = step.StepPair(quiet, quiet, None)
    if r.mfu_spec is not None:
        assert pair.headline() == pytest.approx(100 * r.mfu_spec)
    else:  # no peak known for this CPU
        assert pair.headline() is None and "No peak is known for this device" in pair.text()
    ex = exact_flops(TINY, 2, TINY.seq_len)
    assert pair.phases_text(ex).startswith("backward/forward FLOPs: 2.00; measured time ratio ")


def test_accumulation_as_a_typed_result(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    gas = step.grad_accum(preset("tiny-gpt"), [1, 2], batch=2, seq=16, steps=2, device="cpu", ceiling=False)
    assert "2 measured" in gas.summary()
    f = gas.frame
    assert list(f["gas"]) == [1, 2] and f["predicted_tokens_per_s"].iloc[0] == pytest.approx(f["tokens_per_s"].iloc[0])
    t = gas.table()
    assert list(t.columns) == ["GAS", "tokens per step", "tokens/s", "predicted tokens/s", "step", "optimizer",
                               "MFU, peak", "machine while measured"]
    assert list(t["tokens per step"]) == ["32", "64"]


def test_the_accumulation_model_amortizes_only_the_optimizer():
    import pandas as pd

    df = pd.DataFrame({"gas": [2, 1, 4], "tokens_per_step": [200, 100, 400], "step_s": [1.9, 1.0, 3.7],
                       "optimizer_s": [0.1, 0.1, 0.1]})
    # per micro-batch 0.9 s, the optimizer 0.1 s once per step: 100 tokens per 1.0, 200 per 1.9, 400 per 3.7 s
    assert step.grad_accum_prediction(df) == pytest.approx([100 / 0.95, 100 / 1.0, 100 / 0.925])


def test_the_gc_comparison_unpacks_and_tabulates():
    on = step.GCSeries("gc enabled (automatic)", [0.01, 0.012, 0.05], [(2, 2, 0.03), (1, 0, 0.001)])
    off = step.GCSeries("gc.disable() + gc.collect() every 2 steps", [0.01, 0.011, 0.02], [(1, 2, 0.008)])
    gcs = step.GCComparison(on, off)
    a, b = gcs
    assert (a, b) == (on, off) and on.full_collections == [(2, 0.03)]
    t = gcs.table()
    assert list(t["full collections"]) == [1, 1] and list(t["at steps"]) == ["2", "1"]
    assert list(t["worst step (ms)"]) == ["50.0", "20.0"] and list(t["time in full collections (ms)"]) == ["30.0", "8.00"]


def test_the_step_panel_divides_by_the_basis_it_is_given_and_reads_as_a_table():
    from perflab.flops import plots as fplots

    busy = _busy_basis()
    fig, table = fplots.step_dashboard("tiny-gpt", 16, 2, device="cpu", steps=1, ceiling=busy)
    try:
        assert list(table.index) == ["tiny-gpt b=2 s=16"] and table["MFU, ceiling"].iloc[0] == "inconclusive (busy)"
        assert "busy" in [t.get_text() for t in fig.axes[0].texts]
        assert "ceiling measured on a busy machine" in fig.axes[0].get_title()
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    with pytest.raises(InputError, match=r"^seq=4096 is longer than tiny-gpt's context of 128: choose seq ≤ 128$"):
        fplots.step_dashboard("tiny-gpt", 4096, 2, device="cpu")
