"""A sweep's noise, its outliers, and when its winner may be named (the rule every perflab sweep states).

A sweep measures one quantity (TFLOP/s, higher is better) along an ordered parameter (a width, a
size). On a shared machine one point can be measured in a quiet moment while its neighbours were
slowed, or the reverse, and that single point then "wins" the sweep. The rule here:

* **noise** σ (relative): how much one point's figure moves when it is measured again. With a way to
  measure (a sweep that runs), `CONTROLS` points spread evenly over the sweep are measured once more,
  and σ = 1.4826 × the median |ln(second / first)| / √2 (a robust σ of one measurement: the difference
  of two has √2 of it). It is never less than the points' own timing noise (the standard error of a
  median of n calls, 1.2533 × IQR / median / 1.349 / √n, `perflab.core.stats`; the spread of one
  call when n is not known) nor `MIN_NOISE` (1 %). A point's neighbours say nothing about σ: on a
  GPU an aligned width runs 2.7× faster than the width beside it (an H200's SwiGLU sweep), which
  is the landscape, not noise.
* **outlier**: a point above the median of its `NEIGHBOURS` nearest points on each side by more than
  `K` σ. Before such a point can win it is measured again (up to `retries` times), highest first,
  until the highest point that may win is settled. Its value is then the median of all its
  measurements. If most of them lie within K σ of that median it is **confirmed** (an aligned width
  really is faster) and may win; otherwise it is **unstable** and cannot. One measured only once (no
  way to measure, or a higher point settled the sweep first, or `MAX_EXAMINED` were measured) is
  **unconfirmed** and cannot win either. A point below its neighbours is not measured again.
* **disturbed**: a measurement during which other programs used the machine (its quietness,
  `perflab.core.quietness`) is measured again within the same budget; a point whose measurements
  were all disturbed is marked disturbed, and a disturbed winner or baseline makes the decision
  *inconclusive: the machine was busy (...)*.
* **the decision**: the winner beats the baseline when ln(winner / baseline) > `K` · σ · √2 (two noisy
  points); otherwise it is within the noise.

Everything here works on injected numbers (tests/unit/core/test_sweepnoise.py gives spikes, steps,
jagged landscapes and busy points); the sweeps (`perflab.gemm.swiglu`, `perflab.gemm.mamf`,
`perflab.gemm.heads`) supply the measurements.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perflab.core.jsonable import JSON
from perflab.core.quietness import UNKNOWN, Quietness, as_quietness
from perflab.core.stats import IQR_TO_SIGMA, MAD_TO_SIGMA, MIN_NOISE, K, median_se
from perflab.core.verdicts import CHOOSE, INCONCLUSIVE, WITHIN_NOISE, busy_text

NEIGHBOURS = 2  # points on each side a point is compared with
CONTROLS = 4  # points measured twice to read the run-to-run noise
MAX_EXAMINED = 6  # outliers measured again, highest first, before the rest above the winner are set aside

RULE = (f"noise σ = {MAD_TO_SIGMA} × median |ln(second / first)| / √2 over {CONTROLS} points measured twice, at "
        f"least the medians' own standard error and {MIN_NOISE:.0%}; a point more than {K:g} σ above its "
        f"{NEIGHBOURS} neighbours each side is measured again before it can win; a winner must beat the "
        f"baseline by more than {K:g}·σ·√2")


quietness_of = as_quietness  # a Quietness from one, from its JSON form (a saved row), or unknown


# ---------------------------------------------------------------- noise and outliers

@dataclass(frozen=True)
class Measured:
    """One measurement of one point: its value (higher is better), its relative timing spread
    (IQR / median of its calls, or None), how many calls (None: not known) and the machine's
    quietness while it ran."""

    value: float
    spread: float | None = None
    quietness: Quietness = UNKNOWN
    n: int | None = None

    @property
    def verdict(self) -> str:
        return self.quietness.verdict

    @property
    def timing_noise(self) -> float | None:
        """The relative noise of this measurement from its own calls: the standard error of their
        median (σ of one call when n is not known); None without a spread."""
        if self.spread is None or not math.isfinite(self.spread) or self.spread < 0:
            return None
        sigma = self.spread / IQR_TO_SIGMA
        return median_se(sigma, self.n) if self.n else sigma


def measured(value: float, spread: float | None = None, quietness: Any = None, n: int | None = None) -> Measured:
    """A Measured from a saved row's fields (the quietness as its JSON form, or None)."""
    return Measured(float(value), spread, quietness_of(quietness), int(n) if n else None)


def deviations(values: Sequence[float], neighbours: int = NEIGHBOURS) -> list[float]:
    """ln(value / median of its neighbours) for each point (0 where a point has no neighbour)."""
    out = []
    n = len(values)
    for i, v in enumerate(values):
        near = [values[j] for j in range(max(0, i - neighbours), min(n, i + neighbours + 1)) if j != i]
        near = [x for x in near if x > 0 and math.isfinite(x)]
        out.append(math.log(v / statistics.median(near)) if near and v > 0 else 0.0)
    return out


def noise(measurements: Sequence[Measured] = (), pairs: Sequence[tuple[float, float]] = ()) -> float:
    """The relative noise σ of one measurement (module docstring): from `pairs` of the same point
    measured twice, at least the measurements' own timing noise and MIN_NOISE."""
    run = [abs(math.log(b / a)) for a, b in pairs if a > 0 and b > 0]
    between = MAD_TO_SIGMA * statistics.median(run) / math.sqrt(2) if run else 0.0
    own = [t for t in (m.timing_noise for m in measurements) if t is not None]
    return max(between, statistics.median(own) if own else 0.0, MIN_NOISE)


def outliers(values: Sequence[float], sigma: float, neighbours: int = NEIGHBOURS) -> list[int]:
    """Indices of the points more than K·σ above their neighbours (the ones a spike could make win)."""
    return [i for i, d in enumerate(deviations(values, neighbours)) if d > K * sigma]


def controls(n: int, k: int = CONTROLS) -> list[int]:
    """`k` indices spread evenly over `n` points (all of them when n ≤ k)."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


# ---------------------------------------------------------------- settling a sweep

@dataclass
class Point:
    key: Any  # the swept parameter (a width, a size, a shape)
    measurements: list[Measured]
    # 'ok'; above its neighbours beyond the noise: 'confirmed' (measured again, it repeated), 'unstable'
    # (measured again, it did not) or 'unconfirmed' (measured once: a higher point settled the sweep first)
    status: str = "ok"
    deviation: float = 0.0

    @property
    def used(self) -> list[Measured]:
        """The measurements the point's value is taken from: those not disturbed (all, when every one was)."""
        quiet = [m for m in self.measurements if m.verdict != "disturbed"]
        return quiet or self.measurements

    @property
    def value(self) -> float:
        """Median of the measurements that were not disturbed (of all, when every one was)."""
        return statistics.median(m.value for m in self.used)

    @property
    def disturbed(self) -> bool:
        return all(m.verdict == "disturbed" for m in self.measurements)

    @property
    def quietness(self) -> Quietness:
        """The quietness of the measurement that best represents the point (a quiet one when there is one)."""
        ms = sorted(self.used, key=lambda m: abs(m.value - self.value))
        return ms[0].quietness if ms else UNKNOWN

    @property
    def eligible(self) -> bool:
        """May this point win? Not a spike that did not repeat, nor one measured only once."""
        return self.status in ("ok", "confirmed")

    def as_json(self) -> JSON:
        return {"status": self.status, "deviation": self.deviation, "measurements": len(self.measurements),
                "values": [m.value for m in self.measurements], "disturbed": self.disturbed,
                "quietness": self.quietness.to_json()}


@dataclass
class Settled:
    points: list[Point]
    sigma: float
    remeasured: int = 0
    rule: str = RULE
    notes: list[str] = field(default_factory=list)

    def point(self, key: Any) -> Point:
        for p in self.points:
            if p.key == key:
                return p
        raise KeyError(key)

    def best(self, keys: Sequence[Any] | None = None) -> Point | None:
        """The highest eligible point (among `keys`, when given); ties go to the first."""
        pool = [p for p in self.points if p.eligible and (keys is None or p.key in keys)]
        return max(pool, key=lambda p: p.value, default=None)

    def as_json(self) -> JSON:
        return {"noise": self.sigma, "rule": self.rule, "remeasured": self.remeasured,
                "outliers": [p.key for p in self.points if p.status != "ok"], "notes": list(self.notes)}


def settle(keys: Sequence[Any], first: Mapping[Any, Sequence[Measured]],
           measure: Callable[[Any, int], Measured] | None = None, *, retries: int = 2,
           neighbours: int = NEIGHBOURS) -> Settled:
    """The sweep's points, ordered by `keys`, after the noise, outlier and quietness rules (module docstring).

    first[key]: the measurements already taken of each point. measure(key, attempt) takes one more
    (attempt = 1, 2, ...; at most `retries` more of each point, whatever the reason); None takes none
    (the points are judged as they are, and σ is their own timing noise)."""
    pts = [Point(k, list(first.get(k, ()))) for k in keys]
    pts = [p for p in pts if p.measurements]
    extra = {p.key: 0 for p in pts}  # each point's budget: `retries` more measurements in all
    done = 0
    notes: list[str] = []

    def again(p: Point) -> Measured:
        nonlocal done
        extra[p.key] += 1
        done += 1
        m = measure(p.key, extra[p.key])  # type: ignore[misc]
        p.measurements.append(m)
        return m

    if measure is not None:
        for p in pts:  # disturbed points first: measured again while the budget lasts
            while p.disturbed and extra[p.key] < retries:
                again(p)
    pairs: list[tuple[float, float]] = []
    if measure is not None and retries > 0:
        quiet = [p for p in pts if not p.disturbed]
        for i in controls(len(quiet)):
            p = quiet[i]
            before = p.value
            m = again(p)
            if m.verdict != "disturbed":
                pairs.append((before, m.value))
    elif pts:
        notes.append("run-to-run noise not measured (no point measured twice): σ is the points' own timing noise")
    sigma = noise([m for p in pts for m in p.measurements], pairs)

    def judge(p: Point, d: float) -> None:
        p.deviation = d
        p.status = "ok"
        if d > K * sigma:
            vs = [m.value for m in p.used]
            if len(vs) < 2:
                p.status = "unconfirmed"
                return
            near = sum(abs(math.log(v / p.value)) <= K * sigma for v in vs)
            p.status = "confirmed" if near * 2 > len(vs) else "unstable"

    def judge_all() -> None:
        for p, d in zip(pts, deviations([p.value for p in pts], neighbours), strict=True):
            judge(p, d)

    # the highest point that may win is settled first: an outlier is measured again, `retries` times in
    # all, before it can win; one that did not repeat drops out and the next highest is settled
    examined: set[Any] = set()
    while measure is not None:
        judge_all()
        pool = sorted((p for p in pts if p.status != "unstable" or extra[p.key] < retries), key=lambda p: -p.value)
        top = pool[0] if pool else None
        if (top is None or top.status == "ok" or extra[top.key] >= retries
                or (top.key not in examined and len(examined) >= MAX_EXAMINED)):
            break
        examined.add(top.key)
        while extra[top.key] < retries:
            again(top)
    judge_all()
    s = Settled(pts, sigma, done, notes=notes)
    bad = [p for p in pts if p.status == "unstable"]
    if bad:
        s.notes.append(f"{len(bad)} point(s) stood above their neighbours and did not repeat: they cannot win "
                       f"({', '.join(str(p.key) for p in bad)})")
    unsure = [p for p in pts if p.status == "unconfirmed"]
    if unsure:
        s.notes.append(f"{len(unsure)} point(s) stood above their neighbours and were measured only once: they cannot "
                       f"win ({', '.join(str(p.key) for p in unsure[:8])}{', …' if len(unsure) > 8 else ''})")
    busy = [p for p in pts if p.disturbed]
    if busy:
        s.notes.append(f"{len(busy)} point(s) stayed disturbed ({busy[0].quietness.cause})")
    return s


# ---------------------------------------------------------------- the decision

@dataclass(frozen=True)
class Decision:
    kind: str  # 'choose', 'within the noise' or 'inconclusive'
    speedup: float
    margin: float  # the smallest speed-up that counts: exp(K·σ·√2)
    text: str

    def as_json(self) -> JSON:
        return {"kind": self.kind, "speedup": self.speedup, "margin": self.margin, "text": self.text}


def decide(winner: Point, baseline: Point, sigma: float, what: str = "the winner") -> Decision:
    """Whether `winner` beats `baseline` beyond the noise, said in one sentence; a disturbed winner
    or baseline gives 'inconclusive: the machine was busy (...)'."""
    sp = winner.value / baseline.value
    margin = math.exp(K * sigma * math.sqrt(2))
    busy = next((p for p in (winner, baseline) if p.disturbed), None)
    if busy is not None:
        return Decision(INCONCLUSIVE, sp, margin, busy_text(busy.quietness.cause) + "; measure again when it is quiet")
    if winner.key == baseline.key:
        return Decision(WITHIN_NOISE, 1.0, margin, f"{what} is the baseline itself")
    if sp > margin:
        return Decision(CHOOSE, sp, margin, f"{what} is {sp:.2f}× the baseline, beyond the noise (needs > {margin:.2f}×)")
    return Decision(WITHIN_NOISE, sp, margin,
                    f"{what} is {sp:.2f}× the baseline, within the noise (a real gain needs > {margin:.2f}×)")


# ---------------------------------------------------------------- results served from a file

def saved_summary(rows: Sequence[Mapping[str, Any]], measured_now: set[str]) -> dict[str, Any] | None:
    """How many of a sweep's ok `rows` were read back from its results file rather than measured now
    (`measured_now`: the point keys, `perflab.core.results.point_key`, measured in this run), from when
    to when, and how quiet the machine was for them; None when every row was measured now."""
    from perflab.core.results import point_key

    ok = [r for r in rows if r.get("status") == "ok"]
    old = [r for r in ok if point_key(r.get("params", {})) not in measured_now]
    if not old:
        return None
    times = sorted(str(r.get("time", "undated")).replace("T", " ")[:16] for r in old)
    verdicts = [quietness_of(r.get("quietness")).verdict for r in old]
    q = ", ".join(f"{verdicts.count(v)} {v}" for v in ("quiet", "disturbed", "unknown") if verdicts.count(v))
    return {"points": len(old), "of": len(ok), "from": times[0], "to": times[-1], "quietness": f"machine {q}"}


def saved_note(saved: Mapping[str, Any] | None, where: Any = None) -> str:
    """One line saying that results were served from a file, when they were measured and how quietly
    ('' when nothing was)."""
    if not saved:
        return ""
    return (f"{saved['points']} of {saved['of']} measurements served from results saved {saved['from']}"
            + (f" to {saved['to']}" if saved["to"] != saved["from"] else "") + f" ({saved['quietness']})"
            + (f" in {where}" if where else "") + "; --fresh (fresh=True) measures again")
