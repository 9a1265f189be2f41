"""A rung's verdict: interleaved pairs, a distribution-free interval, the threshold, and noise."""

import math

import pytest

from perflab.tune import ladder, runner, verdict

from .helpers import CPU


def test_the_interval_needs_five_pairs_for_90_percent_and_then_spans_the_sorted_ratios():
    assert verdict.min_pairs() == 5 and verdict.order_rank(4) is None and verdict.order_rank(5) == 1
    assert verdict.order_rank(20) == 6  # P(Bin(20, ½) ≤ 5) = 2.1 % ≤ 5 % < P(≤ 6) = 5.8 %
    few = verdict.ratio_interval([1.0] * 4, [0.5] * 4)
    assert few.point == 2.0 and few.lo == 0.0 and math.isinf(few.hi) and verdict.decide(few) == "inconclusive"
    assert "too few" in few.text()
    iv = verdict.ratio_interval([1.0, 1.0, 1.0, 1.0, 1.0], [0.5, 0.8, 0.9, 0.95, 0.7])
    assert (iv.lo, iv.hi) == (pytest.approx(1 / 0.95), pytest.approx(2.0)) and iv.pairs == 5


@pytest.mark.parametrize("lo,hi,want", [(1.05, 1.2, "adopted"), (0.7, 1.01, "kept out"), (0.99, 1.05, "inconclusive"),
                                        (1.019, 1.3, "inconclusive")])
def test_the_decision_compares_the_whole_interval_with_the_threshold(lo, hi, want):
    assert verdict.decide(verdict.Interval(1.0, lo, hi, 9)) == want
    assert "1.02×" in verdict.rule() and "90 %" in verdict.rule()


def test_interleaving_cancels_drift():
    # the machine slows down steadily (a neighbour's job starts): separate runs of A then B would see
    # B 30 % slower; interleaved pairs see the true 10 % gain of B in every pair
    drift = [1.0 + 0.05 * i for i in range(12)]
    prev = [0.10 * d for d in drift]
    cand = [0.10 / 1.1 * d for d in drift]
    iv = verdict.ratio_interval(prev, cand)
    assert iv.lo == pytest.approx(1.1) and iv.hi == pytest.approx(1.1) and verdict.decide(iv) == "adopted"


def test_an_untouched_category_that_moves_beyond_the_noise_is_reported():
    allow = verdict.noise_allowance_s([0.10, 0.11, 0.10, 0.10], [0.09, 0.09, 0.10, 0.09], 0.10)
    assert allow == pytest.approx(0.015)  # twice the interquartile range, more than 10 % of the step
    assert verdict.noise_allowance_s([0.1] * 4, [0.1] * 4, 0.10) == pytest.approx(0.01)  # the floor: 10 %
    prev = {"compute": 0.060, "optimizer": 0.030, "data_wait": 0.010}
    cand = {"compute": 0.080, "optimizer": 0.010, "data_wait": 0.010}
    moved = verdict.untouched_moves(ladder.rung("adamw").touches, prev, cand, allow)
    assert moved == {"compute": pytest.approx(0.020)}  # the optimizer moved too, but adamw touches it
    assert verdict.untouched_moves(ladder.rung("adamw").touches, prev, {**cand, "compute": 0.065}, allow) == {}
    assert verdict.max_gain_from(0.5) == pytest.approx(2.0) and verdict.max_gain_from(0.01) < 1.02


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
    s = runner.explain("loader", row, prev, CPU)
    assert "small" not in s and "27.0 % of the step before" in s and "kept out: 0.90× (90 % interval 0.80–0.95×, 7 pairs)" in s
    assert "compute rose by 104.0 ms while the workers ran beside the step" in s
    # a small one: the sentence gives the most any change to it could have given
    prev, row = _rows(0.01, compute_after=0.198)
    s = runner.explain("loader", row, prev, CPU)
    assert "could give at most 1.010×, below 1.02×" in s and "compute rose" not in s


def test_a_noisy_row_says_the_machine_was_noisy():
    prev, row = _rows(0.27, compute_after=0.146)
    row["noisy"] = {"optimizer": 0.03}
    assert "The machine was noisy: optimizer +30.0 ms" in runner.explain("loader", row, prev, CPU)


def test_the_same_rung_measured_twice_gives_the_same_verdict_or_inconclusive():
    tp = ladder.preset("smoke")
    base = runner.StepConfig(micro_batch=tp.micro_batch)
    cand = runner.apply_rung("adamw", base, tp, CPU, []).config
    seen = []
    for _ in range(2):
        pm = runner.measure_pair(tp, base, cand, min_pairs=5, warmup=1, device=CPU, budget_s=1.0, profile=False)
        assert pm.interval.pairs >= 5 and pm.interval.lo <= pm.interval.point <= pm.interval.hi
        assert pm.verdict == verdict.decide(pm.interval)
        seen.append(pm.verdict)
    assert set(seen) != {"adopted", "kept out"}, seen


def test_the_drift_note_names_rows_whose_separate_runs_disagree_with_their_pairs():
    base = {"rung": "baseline", "step_s": 0.10, "measured": True}
    steady = {"rung": "sdpa", "step_s": 0.08, "measured": True, "speedup_vs_baseline": 1.25}
    drifted = {"rung": "batch", "step_s": 0.16, "measured": True, "speedup_vs_baseline": 2.4}
    assert "held steady" in runner.drift_note([base, steady])
    note = runner.drift_note([base, steady, drifted])
    assert "drifted" in note and "batch (0.62× from separate runs, 2.40× from pairs)" in note and "sdpa" not in note
