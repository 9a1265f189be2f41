"""A rung's verdict with a stated confidence: adopted, kept out, or inconclusive — and never a verdict
from a busy machine.

    >>> v = judge(blocks)                  # blocks of interleaved pairs, each with its quietness
    >>> v.verdict, v.interval.text(), v.text()
    >>> rule()                             # the rule in one sentence, for a lesson to print

The rule:

1. **Interleaved pairs.** A rung is timed *interleaved* with the configuration it changes: one step of
   each in turn (the order flips every pair), so a machine that drifts (a neighbour's job, a clock
   that ramps) slows both alike. Each pair gives one ratio, previous step ÷ candidate step (above 1:
   the rung is faster).
2. **Blocks, each watched.** Pairs are timed in blocks of at least `BLOCK_PAIRS` pairs and
   `BLOCK_MIN_S` seconds, each inside a `perflab.core.quietness.Watch`. A block during which other
   programs used more than `perflab.core.quietness.DISTURBED_SHARE` of the cores (or shared or
   slowed the GPU) is **dropped and measured again** while the rung's time budget lasts.
3. **A robust estimate.** The speed-up is the median of the kept blocks' pair ratios (one slow pair
   moves a median by one rank, not by its size), with the sign test's distribution-free interval
   (`CONFIDENCE`: between the k-th smallest and the k-th largest ratio; at least 5 pairs for 90 %).
4. **Widened by the disturbance measured.** Others may have taken share s of the cores during the
   kept blocks (below the threshold, but not zero); a ratio can be off by that much, so the interval
   becomes [lo·(1 − s), hi ÷ (1 − s)].
5. **Two halves must agree.** A burst of load lasts a few pairs, and pairs inside it are not
   independent, so one interval over all pairs can be fooled by one burst, and looking again after
   every block gives noise many chances. So a verdict needs at least `MIN_BLOCKS` kept blocks, and
   the earlier half of them and the later half must each reach it on their own (each half's own
   interval, widened alike), besides the interval over all of them: a replication inside the run.
6. **The decision** compares the widened interval with 1 + `ADOPT_MIN_GAIN`:
   * **adopted**: the interval lies above it, and so does each half's;
   * **kept out**: the interval lies below it, and so does each half's;
   * **inconclusive** otherwise when the budget ends: *inconclusive: the machine was busy (…)* when
     too few undisturbed blocks were left to decide (fewer than `MIN_BLOCKS`, or as many dropped as
     kept), else the interval still straddles the threshold, or the halves disagree.

The same rung measured twice therefore gives the same verdict or *inconclusive*: opposite verdicts
need, in each run, three widened 90 % intervals to miss on its side, two of them from separate
stretches of time; a burst that fools one half cannot carry the other, and a burst the counters see
is not used at all. `tests/unit/tune/test_verdict.py` draws bursty, drifting and noisy made-up
timings many times and checks that no two draws of one process give opposite verdicts.

A waterfall category the rung does not touch (`perflab.tune.ladder.Rung.touches`) should not move.
`noise_allowance_s` states how far it may move from timing noise alone; `untouched_moves` lists the
categories that moved further, which a lesson reports as "the machine was noisy".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from perflab.core.jsonable import JSON
from perflab.core.quietness import UNKNOWN, Quietness
from perflab.core.stats import iqr

ADOPT_MIN_GAIN = 0.02  # a rung must make the step at least 2 % faster to be adopted
CONFIDENCE = 0.90  # the interval's coverage
BLOCK_PAIRS = 3  # a block is at least this many interleaved pairs ...
BLOCK_MIN_S = 0.25  # ... and at least this many seconds (long enough for the CPU counters to tell)
MIN_BLOCKS = 4  # a verdict needs at least this many undisturbed blocks (two halves of two)
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
    """The fewest pairs a verdict can rest on: `MIN_BLOCKS` blocks of `BLOCK_PAIRS` pairs (12), and
    enough for each half's `confidence` interval to exist (5 pairs for 90 %)."""
    n = 1
    while order_rank(n, confidence) is None:
        n += 1
    return max(2 * n, MIN_BLOCKS * BLOCK_PAIRS)


def ratio_interval(prev_times: Sequence[float], cand_times: Sequence[float], *,
                   confidence: float = CONFIDENCE) -> Interval:
    """The median per-pair speed-up of interleaved step times and its distribution-free interval.

    `prev_times[i]` and `cand_times[i]` are the two steps of pair i. The interval is the sign test's
    for the median: between the k-th smallest and k-th largest ratio, k from `order_rank`, which
    covers the true median ratio with at least `confidence` whatever the timing noise's distribution,
    as long as pairs are independent. With too few pairs for that, the interval is (0, ∞): nothing
    can be decided yet."""
    return interval_of(pair_ratios(prev_times, cand_times), confidence=confidence)


def interval_of(ratios: Sequence[float], *, confidence: float = CONFIDENCE) -> Interval:
    """The median of per-pair ratios and the sign test's interval for it (see `ratio_interval`)."""
    r = sorted(float(x) for x in ratios)
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
    from perflab.core.quietness import DISTURBED_SHARE

    return (f"each rung is timed step by step in turn with the configuration it changes, in blocks of at least "
            f"{BLOCK_PAIRS} pairs and {BLOCK_MIN_S:g} s; a block during which other programs used more than "
            f"{DISTURBED_SHARE * 100:.0f} % of the cores is dropped and measured again. The speed-up is the median "
            f"of the kept pairs' ratios, with a {confidence * 100:.0f} % interval (the sign test's, from the sorted "
            f"ratios; at least {min_pairs(confidence)} pairs) widened by the share of the cores others still took. "
            f"Adopted: the whole interval above {1 + threshold:.2f}× (at least {threshold * 100:.0f} % faster), and "
            f"the interval of the earlier half of at least {MIN_BLOCKS} kept blocks and that of the later half each "
            "above it too; kept out: all below; inconclusive otherwise when the rung's time budget ends, and "
            "\"inconclusive: the machine was busy\" when too few "
            "undisturbed blocks were left to decide")


@dataclass(frozen=True)
class Block:
    """Consecutive interleaved pairs timed inside one watch of the machine."""

    prev_s: tuple[float, ...]  # the previous configuration's step of each pair, seconds
    cand_s: tuple[float, ...]  # the candidate's step of each pair, seconds
    quietness: Quietness = UNKNOWN

    @property
    def ratios(self) -> list[float]:
        return pair_ratios(self.prev_s, self.cand_s)

    @property
    def median(self) -> float:
        r = self.ratios
        return statistics.median(r) if r else float("nan")

    @property
    def kept(self) -> bool:
        """A block is used unless the machine was disturbed while it ran."""
        return not self.quietness.disturbed

    def to_json(self) -> JSON:
        return {"pairs": len(self.ratios), "median": self.median, "kept": self.kept,
                "quietness": self.quietness.to_json()}


@dataclass(frozen=True)
class Verdict:
    """A rung's verdict from its blocks, with why and the quietness of every measurement it rests on."""

    verdict: str  # 'adopted', 'kept out' or 'inconclusive'
    interval: Interval  # the widened interval of the kept pairs
    reason: str  # for 'inconclusive': 'the machine was busy (…)', 'its blocks disagree (…)', or the straddle
    busy: bool  # inconclusive because the machine was busy
    quietness: Quietness  # of all blocks measured, kept or dropped
    kept: int  # blocks used
    dropped: int  # blocks dropped as disturbed
    blocks: tuple[Block, ...] = field(default=(), repr=False)

    def text(self) -> str:
        """'adopted: 1.10× (…)' or 'inconclusive: the machine was busy (…)'."""
        return f"{self.verdict}: {self.reason}" if self.verdict == "inconclusive" else \
            f"{self.verdict}: {self.interval.text()}"

    def to_json(self) -> JSON:
        return {"verdict": self.verdict, "reason": self.reason, "busy": self.busy,
                "interval": [self.interval.lo, self.interval.hi], "point": self.interval.point,
                "pairs": self.interval.pairs, "blocks_kept": self.kept, "blocks_dropped": self.dropped,
                "quietness": self.quietness.to_json(), "blocks": [b.to_json() for b in self.blocks]}


def widen(iv: Interval, share: float | None) -> Interval:
    """`iv` widened by the share of the cores others took: [lo·(1 − s), hi ÷ (1 − s)]."""
    s = min(max(share or 0.0, 0.0), 0.99)
    if s == 0.0:
        return iv
    return Interval(iv.point, iv.lo * (1 - s), iv.hi / (1 - s) if math.isfinite(iv.hi) else iv.hi, iv.pairs,
                    iv.confidence)


def judge(blocks: Sequence[Block], threshold: float = ADOPT_MIN_GAIN, confidence: float = CONFIDENCE) -> Verdict:
    """The verdict on a rung from its blocks of interleaved pairs (the rule in the module docstring)."""
    blocks = tuple(blocks)
    if not blocks:
        raise ValueError("judge needs at least one block of interleaved pairs")
    kept = [b for b in blocks if b.kept and b.ratios]
    dropped = [b for b in blocks if not b.kept]
    q_all = Quietness.combine(b.quietness for b in blocks)
    bar = 1 + threshold
    ratios = [x for b in kept for x in b.ratios]
    share = Quietness.combine(b.quietness for b in kept).share if kept else None
    if ratios:
        iv = widen(interval_of(ratios, confidence=confidence), share)
    else:  # every block disturbed: the point of all of them, for the record, and no interval
        every = [x for b in blocks for x in b.ratios]
        iv = Interval(statistics.median(every) if every else float("nan"), 0.0, math.inf, len(every), confidence)
    v = decide(iv, threshold) if ratios else "inconclusive"
    enough = len(kept) >= MIN_BLOCKS and len(ratios) >= min_pairs(confidence)
    h = len(kept) // 2
    halves = [widen(interval_of([x for b in part for x in b.ratios], confidence=confidence), share)
              for part in (kept[:h], kept[h:])] if enough else []
    disagree = any(decide(hv, threshold) != v for hv in halves)
    if v != "inconclusive" and enough and not disagree:
        return Verdict(v, iv, "", False, q_all, len(kept), len(dropped), blocks)
    busy = bool(dropped) and (not enough or len(dropped) >= len(kept))
    if busy:
        worst = max(dropped, key=lambda b: b.quietness.share or 0.0).quietness
        reason = f"the machine was busy ({worst.cause}; {len(dropped)} of {len(blocks)} blocks disturbed)"
    elif not enough:
        reason = f"{iv.text()}: too few pairs to decide when the rung's time budget ended"
    elif disagree:
        reason = (f"{iv.text()}, but its earlier and later halves disagree ({halves[0].point:.2f}× and "
                  f"{halves[1].point:.2f}× against {bar:.2f}×)")
    else:
        reason = f"{iv.text()} still straddles {bar:.2f}× when the rung's time budget ended"
    return Verdict("inconclusive", iv, reason, busy, q_all, len(kept), len(dropped), blocks)


def run_blocks(next_block: Callable[[], Block], *, least_pairs: int | None = None,
               out_of_budget: Callable[[], bool], max_blocks: int = 20,
               progress: Callable[[str], None] | None = None) -> Verdict:
    """Measure blocks (`next_block()` times one and returns it) until the verdict is decided or the
    budget ends: the rule's loop, shared by the ladder (real steps) and the tests (made-up ones).
    A disturbed block counts for nothing, so it is in effect measured again while the budget lasts."""
    need = max(min_pairs(), least_pairs or 0)
    blocks: list[Block] = []
    while len(blocks) < max_blocks:
        blk = next_block()
        blocks.append(blk)
        if progress and blk.quietness.disturbed:
            progress(f"block {len(blocks)}: {blk.quietness.line()}: measuring it again")
        if sum(len(b.ratios) for b in blocks if b.kept) >= need:
            v = judge(blocks)
            if progress:
                progress(f"block {len(blocks)}: {v.text()}")
            if v.verdict != "inconclusive":
                return v
        if out_of_budget():
            break
    return judge(blocks)


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
            spread = max(spread, iqr(ts))
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
