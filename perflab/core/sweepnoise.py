"""A sweep's noise, its outliers, and when its winner may be named (the rule every perflab sweep states).

A sweep measures one quantity (TFLOP/s, higher is better) along an ordered parameter (a width, a
size). On a shared machine one point can be measured in a quiet moment while its neighbours were
slowed, or the reverse, and that single point then "wins" the sweep. The rule here:

* **noise** σ (relative): 1.4826 × the median absolute log-deviation of each point from the median of
  its `NEIGHBOURS` nearest points on each side (a robust spread of the sweep around its own smooth
  trend, which one spike cannot move; only with `MIN_POINTS` points or more, since in a shorter
  sweep that scatter is the curve's own shape), and never less than the points' own timing spread (median of
  IQR / median / 1.349 over the points, where the timer reports it) nor `MIN_NOISE`.
* **outlier**: a point whose log-deviation from its neighbours is more than `K` σ. An outlier is
  measured again (up to `retries` times) before it can win. Its value is then the median of all its
  measurements. Still an outlier and most of its measurements lie within `K` σ of that median:
  **confirmed**, a real step (an aligned width is faster than its neighbours), it may win; otherwise
  (or measured only once) **unstable**, it cannot win.
* **disturbed**: a measurement during which other programs used the machine (its quietness,
  `perflab.core.quietness`) is measured again within the same budget; a point whose measurements
  were all disturbed is marked disturbed, and a disturbed winner or baseline makes the decision
  *inconclusive: the machine was busy (...)*.
* **the decision**: the winner beats the baseline when ln(winner / baseline) > `K` · σ · √2 (two noisy
  points); otherwise it is within the noise.

Everything here works on injected numbers (tests/unit/core/test_sweepnoise.py gives spikes, steps and
busy points); the sweeps (`perflab.gemm.swiglu`, `perflab.gemm.mamf`) supply the measurements.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NEIGHBOURS = 2  # points on each side a point is compared with
K = 3.0  # deviations beyond K·σ are outliers; a winner must beat the baseline by K·σ·√2
MIN_NOISE = 0.01  # 1 %: no timing on a shared machine is steadier than this
MIN_POINTS = 8  # fewer points: their scatter around their neighbours is the curve's own shape, not noise
MAD_TO_SIGMA = 1.4826  # median absolute deviation → standard deviation of a normal
IQR_TO_SIGMA = 1.349  # interquartile range → standard deviation of a normal

RULE = (f"noise σ = {MAD_TO_SIGMA} × median |ln(point / median of its {NEIGHBOURS} neighbours each side)| (with "
        f"{MIN_POINTS} points or more), at least the points' own timing spread (IQR/1.349) and {MIN_NOISE:.0%}; a point more than {K:g} σ from its "
        f"neighbours is measured again before it can win; a winner must beat the baseline by more than "
        f"{K:g}·σ·√2")


# ---------------------------------------------------------------- quietness, duck-typed

def verdict_of(q: Any) -> str:
    """'quiet', 'disturbed' or 'unknown' of a Quietness, its JSON dict, or None (unknown)."""
    if q is None:
        return "unknown"
    v = q.get("verdict") if isinstance(q, Mapping) else getattr(q, "verdict", None)
    return str(v) if v in ("quiet", "disturbed", "unknown") else "unknown"


def cause_of(q: Any) -> str:
    if q is None:
        return "quietness not measured"
    c = q.get("cause") if isinstance(q, Mapping) else getattr(q, "cause", None)
    return str(c or verdict_of(q))


def quietness_json(q: Any) -> dict[str, Any] | None:
    """A Quietness (or its dict) as JSON, or None."""
    if q is None:
        return None
    d = q if isinstance(q, Mapping) else (q.to_json() if callable(getattr(q, "to_json", None)) else None)
    if isinstance(d, Mapping):
        return {str(k): v for k, v in d.items()}
    return {"verdict": verdict_of(q), "cause": cause_of(q)}


class _Unwatched:
    result = None


@contextlib.contextmanager
def watching(device: Any = "cpu") -> Iterator[Any]:
    """`perflab.core.quietness.watch(device)` when that module is there: its `.result` after the block
    is the window's Quietness; without it `.result` stays None (quietness unknown)."""
    try:
        from perflab.core import quietness  # type: ignore[attr-defined]
    except ImportError:
        yield _Unwatched()
        return
    with quietness.watch(str(device)) as w:
        yield w


def bench_quietness(result: Any, watched: Any = None) -> Any:
    """The quietness a timing carries (`BenchResult.quietness`), or what a `watching` block around it
    saw when the timing's own verdict is missing or unknown (a window too short to judge)."""
    q = getattr(result, "quietness", None)
    w = getattr(watched, "result", None)
    return w if verdict_of(q) == "unknown" and w is not None else q


# ---------------------------------------------------------------- noise and outliers

@dataclass(frozen=True)
class Measured:
    """One measurement of one point: its value (higher is better), its relative timing spread
    (IQR / median, or None) and the machine's quietness while it ran."""

    value: float
    spread: float | None = None
    quietness: Any = None

    @property
    def verdict(self) -> str:
        return verdict_of(self.quietness)


def deviations(values: Sequence[float], neighbours: int = NEIGHBOURS) -> list[float]:
    """ln(value / median of its neighbours) for each point (0 where a point has no neighbour)."""
    out = []
    n = len(values)
    for i, v in enumerate(values):
        near = [values[j] for j in range(max(0, i - neighbours), min(n, i + neighbours + 1)) if j != i]
        near = [x for x in near if x > 0 and math.isfinite(x)]
        out.append(math.log(v / statistics.median(near)) if near and v > 0 else 0.0)
    return out


def noise(values: Sequence[float], spreads: Sequence[float | None] = (), neighbours: int = NEIGHBOURS) -> float:
    """The sweep's relative noise σ (see the module docstring)."""
    dev = deviations(values, neighbours)
    mad = MAD_TO_SIGMA * statistics.median(abs(d) for d in dev) if len(dev) >= MIN_POINTS else 0.0
    own = [s / IQR_TO_SIGMA for s in spreads if s is not None and math.isfinite(s) and s >= 0]
    return max(mad, statistics.median(own) if own else 0.0, MIN_NOISE)


def outliers(values: Sequence[float], sigma: float, neighbours: int = NEIGHBOURS) -> list[int]:
    """Indices of the points more than K·σ from their neighbours."""
    return [i for i, d in enumerate(deviations(values, neighbours)) if abs(d) > K * sigma]


# ---------------------------------------------------------------- settling a sweep

@dataclass
class Point:
    key: Any  # the swept parameter (a width, a size, a shape)
    measurements: list[Measured]
    status: str = "ok"  # 'ok', 'confirmed' (a real outlier), 'unstable' (a spike that would not repeat)
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
    def quietness(self) -> Any:
        """The quietness of the measurement that best represents the point (a quiet one when there is one)."""
        ms = sorted(self.used, key=lambda m: abs(m.value - self.value))
        return ms[0].quietness if ms else None

    @property
    def eligible(self) -> bool:
        """May this point win? Not unstable (a spike that would not repeat)."""
        return self.status != "unstable"

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "deviation": self.deviation, "measurements": len(self.measurements),
                "values": [m.value for m in self.measurements], "disturbed": self.disturbed,
                "quietness": quietness_json(self.quietness)}


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

    def as_json(self) -> dict[str, Any]:
        return {"noise": self.sigma, "rule": self.rule, "remeasured": self.remeasured,
                "outliers": [p.key for p in self.points if p.status != "ok"], "notes": list(self.notes)}


def settle(keys: Sequence[Any], first: Mapping[Any, Sequence[Measured]],
           measure: Callable[[Any, int], Measured] | None = None, *, retries: int = 2,
           neighbours: int = NEIGHBOURS) -> Settled:
    """The sweep's points, ordered by `keys`, after the outlier and quietness rules (module docstring).

    first[key]: the measurements already taken of each point. measure(key, attempt) takes one more
    (attempt = 1, 2, ...; at most `retries` more of each point, whatever the reason); None takes none
    (the points are judged as they are)."""
    pts = [Point(k, list(first.get(k, ()))) for k in keys]
    pts = [p for p in pts if p.measurements]
    extra = {p.key: 0 for p in pts}  # each point's budget: `retries` more measurements in all
    done = 0

    def again(p: Point) -> None:
        nonlocal done
        extra[p.key] += 1
        done += 1
        p.measurements.append(measure(p.key, extra[p.key]))  # type: ignore[misc]

    if measure is not None:
        for p in pts:  # disturbed points first: measured again while the budget lasts
            while p.disturbed and extra[p.key] < retries:
                again(p)
    values = [p.value for p in pts]
    sigma = noise(values, [p.measurements[0].spread for p in pts], neighbours)
    if measure is not None:
        for _ in range(2):  # a point can become an outlier once a spike beside it is measured again
            for i in outliers(values, sigma, neighbours):
                while extra[pts[i].key] < retries:
                    again(pts[i])
            values = [p.value for p in pts]
    for p, d in zip(pts, deviations(values, neighbours), strict=True):
        p.deviation = d
        if abs(d) > K * sigma:
            vs = [m.value for m in p.used]
            near = sum(abs(math.log(v / p.value)) <= K * sigma for v in vs)
            p.status = "confirmed" if len(vs) > 1 and near * 2 > len(vs) else "unstable"
    s = Settled(pts, sigma, done)
    bad = [p for p in pts if p.status == "unstable"]
    if bad:
        s.notes.append(f"{len(bad)} point(s) disagreed with their neighbours and did not repeat: they cannot win "
                       f"({', '.join(str(p.key) for p in bad)})")
    busy = [p for p in pts if p.disturbed]
    if busy:
        s.notes.append(f"{len(busy)} point(s) stayed disturbed ({cause_of(busy[0].quietness)})")
    return s


# ---------------------------------------------------------------- the decision

@dataclass(frozen=True)
class Decision:
    kind: str  # 'choose', 'within the noise' or 'inconclusive'
    speedup: float
    margin: float  # the smallest speed-up that counts: exp(K·σ·√2)
    text: str

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "speedup": self.speedup, "margin": self.margin, "text": self.text}


def decide(winner: Point, baseline: Point, sigma: float, what: str = "the winner") -> Decision:
    """Whether `winner` beats `baseline` beyond the noise, said in one sentence; a disturbed winner
    or baseline gives 'inconclusive: the machine was busy (...)'."""
    sp = winner.value / baseline.value
    margin = math.exp(K * sigma * math.sqrt(2))
    busy = next((p for p in (winner, baseline) if p.disturbed), None)
    if busy is not None:
        return Decision("inconclusive", sp, margin,
                        f"inconclusive: the machine was busy ({cause_of(busy.quietness)}); measure again when it is quiet")
    if winner.key == baseline.key:
        return Decision("within the noise", 1.0, margin, f"{what} is the baseline itself")
    if sp > margin:
        return Decision("choose", sp, margin, f"{what} is {sp:.2f}× the baseline, beyond the noise (needs > {margin:.2f}×)")
    return Decision("within the noise", sp, margin,
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
    verdicts = [verdict_of(r.get("quietness")) for r in old]
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
