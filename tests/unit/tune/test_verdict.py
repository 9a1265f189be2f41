"""A rung's verdict: interleaved pairs in watched blocks, a distribution-free interval, the threshold, the
machine's quietness, and noise. Every decision here is made on made-up timings whose right answer is known."""

import math
import random
from collections import Counter

import pytest

from perflab.core.quietness import Quietness
from perflab.tune import ladder, verdict


def test_the_interval_needs_five_pairs_for_90_percent_and_then_spans_the_sorted_ratios():
    assert verdict.order_rank(4) is None and verdict.order_rank(5) == 1
    assert verdict.min_pairs() == 12  # four blocks of three pairs: two halves of at least five pairs each
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
    # type-7 quartiles (perflab.core.stats) of 0.100, 0.105, 0.110, 0.115: 0.10375 and 0.11125, an IQR of 0.0075
    allow = verdict.noise_allowance_s([0.100, 0.105, 0.110, 0.115], [0.09, 0.09, 0.10, 0.09], 0.10)
    assert allow == pytest.approx(0.015)  # twice the interquartile range, more than 10 % of the step
    assert verdict.noise_allowance_s([0.1] * 4, [0.1] * 4, 0.10) == pytest.approx(0.01)  # the floor: 10 %
    prev = {"compute": 0.060, "optimizer": 0.030, "data_wait": 0.010}
    cand = {"compute": 0.080, "optimizer": 0.010, "data_wait": 0.010}
    moved = verdict.untouched_moves(ladder.rung("adamw").touches, prev, cand, allow)
    assert moved == {"compute": pytest.approx(0.020)}  # the optimizer moved too, but adamw touches it
    assert verdict.untouched_moves(ladder.rung("adamw").touches, prev, {**cand, "compute": 0.065}, allow) == {}
    assert verdict.max_gain_from(0.5) == pytest.approx(2.0) and verdict.max_gain_from(0.01) < 1.02


# ---------------------------------------------------------------- the rule on made-up processes

QUIET = Quietness("quiet", 0.01, 0.3, 2, 0.006, 2, "")


def _busy(share: float) -> Quietness:
    return Quietness("disturbed", share, 0.3, 2, share * 0.6, 2, f"other programs used {share * 100:.0f} % of 2 cores")


def _process(seed: int, rho: float, *, sigma: float = 0.05, drift: float = 0.0, bursts: float = 0.0,
             seen: bool = False, steady: float = 0.0, max_blocks: int = 10) -> verdict.Verdict:
    """One rung measured as the ladder measures it, on made-up step times: the candidate is `rho` times
    faster; every step varies by a log-normal `sigma`; the machine slows by `drift` per step; a burst of
    load (1–6 steps, each slowed 1.3–2.5×) starts at a step with probability `bursts`, and its block is
    reported disturbed when `seen`; a `steady` neighbour slows every step by up to that share and
    every block is disturbed."""
    rng = random.Random(seed)
    state = {"t": 0, "burst": 0, "pairs": 0, "blocks": 0}

    def step(base: float) -> tuple[float, bool]:
        state["t"] += 1
        f = math.exp(rng.gauss(0, sigma)) * (1 + drift * state["t"])
        hit = state["burst"] > 0 or rng.random() < bursts
        if state["burst"] > 0:
            state["burst"] -= 1
        elif hit:
            state["burst"] = rng.randint(1, 6) - 1
        if hit:
            f *= rng.uniform(1.3, 2.5)
        if steady:
            f *= 1 + steady * rng.random()
        return base * f, hit

    def next_block() -> verdict.Block:
        pa, pb, hits = [], [], 0
        for _ in range(verdict.BLOCK_PAIRS):
            order = (0.1, 0.1 / rho) if state["pairs"] % 2 == 0 else (0.1 / rho, 0.1)
            (t1, h1), (t2, h2) = step(order[0]), step(order[1])
            a, b = (t1, t2) if state["pairs"] % 2 == 0 else (t2, t1)
            state["pairs"] += 1
            pa.append(a)
            pb.append(b)
            hits += h1 + h2
        q = _busy(0.5) if steady else (_busy(0.4) if seen and hits else QUIET)
        return verdict.Block(tuple(pa), tuple(pb), q)

    def out_of_budget() -> bool:
        state["blocks"] += 1
        return state["blocks"] >= max_blocks

    return verdict.run_blocks(next_block, out_of_budget=out_of_budget, max_blocks=max_blocks)


PROCESSES = {"steady noise": {}, "wide noise": {"sigma": 0.15}, "drift": {"drift": 0.02},
             "bursts unseen": {"bursts": 0.1}, "bursts seen": {"bursts": 0.25, "seen": True}}


@pytest.mark.parametrize("kind", PROCESSES)
@pytest.mark.parametrize("rho", [0.8, 0.95, 1.0, 1.02, 1.05, 1.1, 1.3])
def test_no_two_draws_of_one_process_give_opposite_verdicts(kind, rho):
    """Sixty draws of each made-up process (seeded: the same draws every run). No two give opposite
    verdicts, even at the threshold itself (1.02×); away from it, no draw is on the wrong side."""
    seen = Counter(_process(seed, rho, **PROCESSES[kind]).verdict for seed in range(60))
    assert not (seen["adopted"] and seen["kept out"]), seen
    if rho <= 1.0:
        assert seen["adopted"] == 0, seen
    if rho >= 1.05:
        assert seen["kept out"] == 0, seen


@pytest.mark.parametrize("kind,least", [("steady noise", 18), ("drift", 18), ("bursts unseen", 8)])
def test_a_clear_effect_is_found_through_drift_and_bursts(kind, least):
    """A 30 % gain or loss is decided within the budget in most draws (bursts the counters miss cost
    decisions, never the right side)."""
    assert Counter(_process(s, 1.3, **PROCESSES[kind]).verdict for s in range(20))["adopted"] >= least
    assert Counter(_process(s, 0.8, **PROCESSES[kind]).verdict for s in range(20))["kept out"] >= least


def test_a_steadily_busy_machine_gives_no_verdict_and_says_it_was_busy():
    for s in range(10):
        v = _process(s, 1.3, steady=0.5)
        assert v.verdict == "inconclusive" and v.busy and v.kept == 0 and v.dropped == 10
        assert math.isfinite(v.interval.point) and v.interval.lo == 0.0 and math.isinf(v.interval.hi)
        assert v.text() == ("inconclusive: the machine was busy (other programs used 50 % of 2 cores; "
                            "10 of 10 blocks disturbed)")
        assert v.quietness.disturbed and v.to_json()["quietness"]["verdict"] == "disturbed"


def _block(ratio: float, q: Quietness = QUIET, n: int = 3) -> verdict.Block:
    return verdict.Block((0.1,) * n, (0.1 / ratio,) * n, q)


def test_a_disturbed_block_is_dropped_whatever_it_measured():
    quiet = [_block(1.2) for _ in range(4)]
    burst = _block(0.5, _busy(0.6))  # the candidate's steps ran inside a burst: it looks twice as slow
    v = verdict.judge(quiet[:2] + [burst] + quiet[2:])
    assert v.verdict == "adopted" and v.kept == 4 and v.dropped == 1 and v.interval.point == pytest.approx(1.2)
    assert v.quietness.disturbed  # the verdict still says that part of its measurement was disturbed
    d = v.to_json()
    assert [b["kept"] for b in d["blocks"]] == [True, True, False, True, True]
    assert d["blocks"][2]["quietness"]["share"] == 0.6


def test_as_many_disturbed_blocks_as_quiet_ones_is_busy_not_a_straddle():
    v = verdict.judge([_block(1.01), _block(1.03)] + [_block(1.0, _busy(0.3))] * 2)
    assert v.verdict == "inconclusive" and v.busy and v.reason.startswith("the machine was busy (other programs")
    calm = verdict.judge([_block(x) for x in (0.99, 1.05, 1.0, 1.04, 1.01, 1.03)])
    assert calm.verdict == "inconclusive" and not calm.busy and "still straddles 1.02×" in calm.reason


def test_halves_that_disagree_give_no_verdict():
    v = verdict.judge([_block(1.3)] * 4 + [_block(1.01)] * 4)  # a change of speed halfway through
    assert v.verdict == "inconclusive" and "earlier and later halves disagree (1.30× and 1.01×" in v.reason
    assert verdict.judge([_block(1.3)] * 8).verdict == "adopted"
    assert verdict.judge([_block(1.3)] * 3).verdict == "inconclusive"  # too few blocks to split


def test_the_interval_widens_with_the_share_others_took():
    iv = verdict.Interval(1.05, 1.03, 1.07, 12)
    wide = verdict.widen(iv, 0.05)
    assert wide.lo == pytest.approx(1.03 * 0.95) and wide.hi == pytest.approx(1.07 / 0.95) and wide.point == 1.05
    assert verdict.widen(iv, None) == iv
    slightly = Quietness("quiet", 0.05, 0.3, 2, 0.03, 2, "")
    assert verdict.judge([_block(1.04)] * 4).verdict == "adopted"
    assert verdict.judge([_block(1.04, slightly)] * 4).verdict == "inconclusive"  # 1.04 × 0.95 < 1.02
