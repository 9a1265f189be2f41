"""Tests of `perflab.tune.rows`: a rung's row, its MFU, its explanation, and the drift note."""

from __future__ import annotations

import pytest

from perflab.flops import mfu
from perflab.tune import rows
from perflab.tune.changes import Change
from perflab.tune.config import StepConfig
from perflab.tune.measure import Measurement

from .helpers import CPU, SMOKE


def _measurement(peak: int) -> Measurement:
    return Measurement(step_s=0.01, step_times_s=[0.01], data_wait_s=0.0, forward_s=0.004, backward_s=0.004,
                       optimizer_s=0.002, compile_s=None, tokens_per_step=256, losses=[6.2], peak_bytes=peak,
                       peak_how="tracemalloc", model_flops=10**9, hardware_flops=10**9)


def test_a_faster_batch_rung_over_the_budget_is_not_adopted():
    ch = Change(StepConfig(micro_batch=8), True, "micro-batch 2 → 8")
    base = {"rung": "baseline", "step_s": 0.02, "loss": 6.2, "parity_ok": True}
    r = mfu.Basis(0.1, "measured ceiling", "fp32", "fastest of 5", "2026-01-01", (1, 2, 3), 1)
    budget = SMOKE.memory_budget_bytes
    assert budget is not None
    over = rows.rung_row("batch", ch, _measurement(budget + 1), base, base, r, SMOKE, CPU)
    assert over["parity_ok"] and over["speedup_vs_previous"] == pytest.approx(2.0)
    assert over["fits_budget"] is False and over["adopted"] is False
    inside = rows.rung_row("batch", ch, _measurement(1024), base, base, r, SMOKE, CPU)
    assert inside["fits_budget"] is True and inside["adopted"] is True


def test_a_rung_that_does_not_apply_repeats_the_configuration_it_leaves_unchanged():
    prev = {"rung": "baseline", "step_s": 0.02, "mfu": 0.1, "loss": 6.2, "parity_ok": True, "speedup_vs_baseline": 1.0}
    row = rows.rung_row("numa", Change(StepConfig(), False, "one NUMA node here"), None, prev, prev, None, SMOKE, CPU)
    assert row["measured"] is False and row["verdict"] == "n/a" and row["step_s"] == 0.02 and row["mfu"] == 0.1
    assert row["explain"] == "one NUMA node here" and row["config"] == StepConfig().as_dict()


def test_the_ladder_and_the_audit_measure_a_cpu_ceiling_at_the_same_shape():
    from perflab.tune.ladder import preset

    assert rows.step_shape(preset("cpu")) == mfu.CEILING_SHAPE_CPU == mfu.ceiling_shape(CPU)


def test_a_rung_faster_than_its_ceiling_shows_no_mfu_and_says_the_ceiling_is_suspect():
    low = mfu.Basis(1e-6, "measured ceiling", "fp32", "fastest of 5", "2026-01-01", (1, 2, 3), 1)
    f = rows.mfu_fields(_measurement(1024), low)
    assert f["mfu"] is None and f["hfu"] is None and "ceiling is suspect" in f["mfu_suspect"]
    ok = rows.mfu_fields(_measurement(1024), mfu.Basis(1e6, "spec peak", "fp32", "datasheet"))
    assert 0 < ok["mfu"] < 1 and ok["mfu_suspect"] is None and ok["mfu_basis_info"]["tflops"] == 1e6


def _rows(data_share: float, compute_after: float):
    step = 0.2
    prev = {"rung": "baseline", "step_s": step, "speedup_vs_baseline": 1.0,
            "breakdown": {"compute": step * (1 - data_share), "data_wait": step * data_share, "optimizer": 0.0,
                          "host_sync": 0.0, "launch_overhead": 0.0}}
    row = {"rung": "loader", "step_s": step, "parity_ok": True, "speedup_vs_previous": 0.9, "interval": [0.8, 0.95],
           "pairs": 7, "confidence": 0.9, "threshold": 1.02, "verdict": "kept out", "noise_allowance_s": 0.02,
           "breakdown": {"compute": compute_after, "data_wait": 0.001, "optimizer": 0.0, "host_sync": 0.0,
                         "launch_overhead": 0.0}}
    return prev, row


def test_the_loader_sentence_follows_the_measured_rows():
    # a large data wait (27 % of the step, lesson 11's own measurement in the issue) is never called small
    prev, row = _rows(0.27, compute_after=0.25)
    s = rows.explain("loader", row, prev, CPU)
    assert "small" not in s and "27.0 % of the step before" in s and "kept out: 0.90× (90 % interval 0.80–0.95×, 7 pairs)" in s
    assert "compute rose by 104.0 ms while the workers ran beside the step" in s
    # a small one: the sentence gives the most any change to it could have given
    prev, row = _rows(0.01, compute_after=0.198)
    s = rows.explain("loader", row, prev, CPU)
    assert "could give at most 1.010×, below 1.02×" in s and "compute rose" not in s


def test_a_noisy_row_says_the_machine_was_noisy():
    prev, row = _rows(0.27, compute_after=0.146)
    row["noisy"] = {"optimizer": 0.03}
    assert "The machine was noisy: optimizer +30.0 ms" in rows.explain("loader", row, prev, CPU)


def test_the_drift_note_names_rows_whose_separate_runs_disagree_with_their_pairs():
    base = {"rung": "baseline", "step_s": 0.10, "measured": True}
    steady = {"rung": "sdpa", "step_s": 0.08, "measured": True, "speedup_vs_baseline": 1.25}
    drifted = {"rung": "batch", "step_s": 0.16, "measured": True, "speedup_vs_baseline": 2.4}
    assert "held steady" in rows.drift_note([base, steady])
    note = rows.drift_note([base, steady, drifted])
    assert "drifted" in note and "batch (0.62× from separate runs, 2.40× from pairs)" in note and "sdpa" not in note
