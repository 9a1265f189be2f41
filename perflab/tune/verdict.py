"""A rung's verdict with a stated confidence: adopted, kept out, or inconclusive.

    >>> iv = ratio_interval(prev_times, cand_times)   # per-pair speed-ups: median and its interval
    >>> decide(iv)                                    # 'adopted', 'kept out' or 'inconclusive'
    >>> rule()                                        # the rule in one sentence, for a lesson to print

A rung is timed *interleaved* with the configuration it changes: one step of each in turn (the
order flips every pair), so a machine that drifts (a neighbour's job, a clock that ramps) slows both
alike. Each pair gives one ratio, previous step ÷ candidate step (above 1: the rung is faster). The
speed-up is the median of those ratios, and its interval is the sign test's distribution-free
interval for the median (`CONFIDENCE`: between the k-th smallest and the k-th largest ratio; at
least 5 pairs for 90 %). The decision compares the whole interval with the threshold
1 + `ADOPT_MIN_GAIN`:

* **adopted**: the interval lies above it (the rung is faster by more than the threshold);
* **kept out**: the interval lies below it;
* **inconclusive**: the interval straddles it when the rung's time budget ends.

The same rung measured twice therefore gives the same verdict or, when the machine is too noisy to
tell, *inconclusive*: two intervals that each clear the threshold on opposite sides would need a
90 % interval to miss twice (at most a 5 % chance each, on opposite sides).

A waterfall category the rung does not touch (`perflab.tune.ladder.Rung.touches`) should not move.
`noise_allowance_s` states how far it may move from timing noise alone; `untouched_moves` lists the
categories that moved further, which a lesson reports as "the machine was noisy".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

ADOPT_MIN_GAIN = 0.02  # a rung must make the step at least 2 % faster to be adopted
CONFIDENCE = 0.90  # the interval's coverage
NOISE_FLOOR_SHARE = 0.10  # an untouched category may move by this share of the step (one profiled step each)
VERDICTS = ("adopted", "kept out", "inconclusive")


@dataclass(frozen=True)
class Interval:
    """The median per-pair speed-up and its interval, from `pairs` interleaved pairs."""

    point: float
    lo: float
    hi: float
    pairs: int
    confidence: float = CONFIDENCE

    def text(self) -> str:
        """'1.07× (90 % interval 1.03–1.11×, 6 pairs)'."""
        if not math.isfinite(self.hi):
            return f"{self.point:.2f}× ({self.pairs} pair{'s' if self.pairs != 1 else ''}: too few for an interval)"
        return (f"{self.point:.2f}× ({self.confidence:.0%} interval {self.lo:.2f}–{self.hi:.2f}×, "
                f"{self.pairs} pair{'s' if self.pairs != 1 else ''})").replace("%", " %", 1)


def pair_ratios(prev_times: Sequence[float], cand_times: Sequence[float]) -> list[float]:
    """previous ÷ candidate for each interleaved pair (above 1: the candidate was faster)."""
    n = min(len(prev_times), len(cand_times))
    return [float(prev_times[i]) / float(cand_times[i]) for i in range(n) if cand_times[i] > 0]


def order_rank(n: int, confidence: float = CONFIDENCE) -> int | None:
    """The rank k (1-based) of the distribution-free interval [x_(k), x_(n+1-k)] for the median of n
    sorted values: the largest k with P(Binomial(n, ½) < k) ≤ (1 - confidence) / 2 (the sign test's
    interval). None when n is too small for `confidence` (below 5 values for 90 %)."""
    a = (1 - confidence) / 2
    k, tail = 0, 0.0
    while k < n:
        nxt = tail + math.comb(n, k) / 2**n  # P(B ≤ k)
        if nxt > a:
            break
        tail, k = nxt, k + 1
    return k if k >= 1 else None


def min_pairs(confidence: float = CONFIDENCE) -> int:
    """The fewest pairs whose median has a `confidence` interval at all (5 for 90 %)."""
    n = 1
    while order_rank(n, confidence) is None:
        n += 1
    return n


def ratio_interval(prev_times: Sequence[float], cand_times: Sequence[float], *,
                   confidence: float = CONFIDENCE) -> Interval:
    """The median per-pair speed-up of interleaved step times and its distribution-free interval.

    `prev_times[i]` and `cand_times[i]` are the two steps of pair i. The interval is the sign test's
    for the median: between the k-th smallest and k-th largest ratio, k from `order_rank`, which
    covers the true median ratio with at least `confidence` whatever the timing noise's distribution,
    as long as pairs are independent. With too few pairs for that, the interval is (0, ∞): nothing
    can be decided yet."""
    r = sorted(pair_ratios(prev_times, cand_times))
    if not r:
        raise ValueError("ratio_interval needs at least one pair of step times")
    point = statistics.median(r)
    k = order_rank(len(r), confidence)
    if k is None:
        return Interval(point, 0.0, math.inf, len(r), confidence)
    return Interval(point, r[k - 1], r[len(r) - k], len(r), confidence)


def decide(iv: Interval, threshold: float = ADOPT_MIN_GAIN) -> str:
    """'adopted' when the whole interval is above 1 + threshold, 'kept out' when it is wholly below,
    'inconclusive' when it straddles the threshold."""
    bar = 1 + threshold
    if iv.lo > bar:
        return "adopted"
    if iv.hi < bar:
        return "kept out"
    return "inconclusive"


def rule(threshold: float = ADOPT_MIN_GAIN, confidence: float = CONFIDENCE) -> str:
    """The decision rule in one sentence, with its numbers."""
    return (f"each rung is timed step by step in turn with the configuration it changes; its speed-up is the "
            f"median of the per-pair ratios, with a {confidence * 100:.0f} % interval (the sign test's, from the "
            f"sorted ratios; at least {min_pairs(confidence)} pairs). Adopted: the whole "
            f"interval above {1 + threshold:.2f}× (at least {threshold * 100:.0f} % faster); kept out: wholly below; "
            "inconclusive: the interval still straddles it when the rung's time budget ends")


def noise_rule(floor_share: float = NOISE_FLOOR_SHARE) -> str:
    """The noise rule for untouched waterfall categories in one sentence, with its numbers."""
    return (f"a waterfall category a rung does not touch may move by up to {floor_share * 100:.0f} % of the step "
            "before it, or twice the spread (interquartile range) of the interleaved step times if that is larger; "
            "a larger move is reported as a noisy machine, not as the rung's effect")


def noise_allowance_s(prev_times: Sequence[float], cand_times: Sequence[float], step_s: float,
                      floor_share: float = NOISE_FLOOR_SHARE) -> float:
    """Seconds an untouched waterfall category may move from noise alone: the larger of
    `floor_share` of the step (the categories come from one profiled step per configuration) and
    twice the interquartile range of the interleaved step times."""
    spread = 0.0
    for ts in (prev_times, cand_times):
        if len(ts) >= 4:
            q = statistics.quantiles(ts, n=4)
            spread = max(spread, q[2] - q[0])
        elif len(ts) >= 2:
            spread = max(spread, max(ts) - min(ts))
    return max(floor_share * step_s, 2 * spread)


def untouched_moves(touches: Sequence[str], prev_breakdown: Mapping[str, float],
                    cand_breakdown: Mapping[str, float], allowance_s: float) -> dict[str, float]:
    """Seconds moved by each category the rung does not touch, for those that moved beyond
    `allowance_s` (an empty dict: the untouched categories stayed within the noise)."""
    out = {}
    if not prev_breakdown or not cand_breakdown:
        return out
    for c, v in cand_breakdown.items():
        if c in touches:
            continue
        d = float(v) - float(prev_breakdown.get(c, 0.0))
        if abs(d) > allowance_s:
            out[c] = d
    return out


def max_gain_from(share: float) -> float:
    """The largest speed-up a change can give by removing a category that is `share` of the step:
    1 / (1 - share) (Amdahl's law with the category made free)."""
    return float("inf") if share >= 1 else 1.0 / (1.0 - max(share, 0.0))
