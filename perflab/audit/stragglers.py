"""Across a job's ranks: who is the straggler, and how long the others waited for it in collectives.

* **stragglers**: a rank whose median step time, or median compute time per step, stands out from
  the others' by the robust z-score of Iglewicz and Hoaglin, z = 0.6745 (x − median) / MAD > 3.5, the
  MAD (median absolute deviation, `perflab.core.stats.mad`) floored at 1 % of the median so that
  sub-percent differences never count: when the other ranks agree closely, a rank must be
  3.5 / 0.6745 × 1 % ≈ 5.2 % above the median to be flagged. It needs at least 3 ranks; with fewer the
  slowest rank and the spread are given, no verdict. (The modified z-score and its 3.5 limit: B. Iglewicz
  and D. Hoaglin, "How to Detect and Handle Outliers", ASQC 1993, as the NIST/SEMATECH e-Handbook of
  Statistical Methods, section 1.3.5.17, gives it.) In a job whose ranks meet in blocking collectives
  every step, the step times come out equal: the others wait for the straggler inside the collectives.
  So a straggler shows in its *compute* time and in arriving last at the collectives (the waits below),
  rarely in its step time. HolisticTraceAnalysis looks at the arrival: its straggler analysis flags the
  ranks that start the last dominant communication kernel of a step late
  (`hta/analyzers/straggler.py`, `find_stragglers_with_late_start_comm_kernels`).
* **waits in collectives**: the k-th communication kernel of one name in one step is taken to be the
  same collective on every rank (only where every rank ran as many of them; point-to-point sends and
  receives, which pair two ranks, are never matched); the rank that started it last held the others
  up, each for the time between its own start and the last start. This reads the ranks' clocks as
  one clock: true on one host, and to the clock sync's accuracy across hosts.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from perflab.audit.hta import StepFigures
from perflab.core.stats import mad

Z_LIMIT = 3.5  # Iglewicz & Hoaglin's robust z-score limit for an outlier
MAD_FLOOR = 0.01  # the MAD is at least 1 % of the median
# point-to-point transfers (pipeline sends, NCCL SendRecv) pair two ranks, not the whole group: never matched
P2P_RE = re.compile(r"send|recv|p2p", re.I)


def min_flagged_excess() -> float:
    """How far above the median a rank must be to be flagged when the others agree within the MAD floor:
    Z_LIMIT / 0.6745 × MAD_FLOOR (about 5.2 %)."""
    return Z_LIMIT / 0.6745 * MAD_FLOOR


def robust_z(values: dict[int, float]) -> dict[int, float]:
    """rank → 0.6745 (x − median) / MAD, the MAD floored at MAD_FLOOR × median."""
    xs = list(values.values())
    med = statistics.median(xs)
    spread = max(mad(xs), MAD_FLOOR * abs(med))
    if spread <= 0:
        return dict.fromkeys(values, 0.0)
    return {r: 0.6745 * (x - med) / spread for r, x in values.items()}


@dataclass(frozen=True)
class Stragglers:
    """The ranks that stand out (module docstring), with the z-score of each that does."""

    rule: str
    slowest_rank: int  # by median step time
    step_spread: float | None  # (slowest − fastest) / median of the ranks' median steps
    ranks: list[int] = field(default_factory=list)
    by_step: dict[int, float] = field(default_factory=dict)  # rank → z of its median step, where above Z_LIMIT
    by_compute: dict[int, float] = field(default_factory=dict)  # rank → z of its median compute per step
    verdict: str = ""


def stragglers(step_s: dict[int, float], compute_s: dict[int, float]) -> Stragglers:
    """Ranks whose median step time (`step_s`, rank → s) or compute per step stands out (module docstring)."""
    slowest = max(step_s, key=lambda r: step_s[r])
    med = statistics.median(step_s.values())
    spread = (max(step_s.values()) - min(step_s.values())) / med if med > 0 else None
    rule = (f"robust z-score 0.6745 (x - median) / MAD > {Z_LIMIT}, MAD at least {MAD_FLOOR * 100:g} % of the median "
            f"(so at least {100 * min_flagged_excess():.1f} % above it when the others agree), over ranks' median step "
            "and compute time")
    if len(step_s) < 3:
        return Stragglers(rule, slowest, spread, verdict=f"no verdict with {len(step_s)} rank(s): a straggler stands "
                                                         "out from at least 2 others, so give at least 3 ranks' traces")
    zs, zc = robust_z(step_s), robust_z(compute_s)
    by_step = {r: z for r, z in zs.items() if z > Z_LIMIT}
    by_compute = {r: z for r, z in zc.items() if z > Z_LIMIT}
    ranks = sorted(set(by_step) | set(by_compute))
    why = []
    for r in ranks:
        parts = [f"{what} z = {d[r]:.3g}" for what, d in (("step time", by_step), ("compute", by_compute)) if r in d]
        why.append(f"rank {r} ({', '.join(parts)})")
    return Stragglers(rule, slowest, spread, ranks, by_step, by_compute,
                      ", ".join(why) if why else "none: no rank's step or compute time stands out")


@dataclass(frozen=True)
class CollectiveWaits:
    """Collectives matched across ranks, and per rank the time per step it held the others up and waited."""

    matched: int
    unmatched: int  # collectives some rank ran more often than another in a step
    steps: int  # steps every rank profiled
    held_up_others_s: dict[int, float]  # rank → the others' time waiting for it, per step
    waited_s: dict[int, float]  # rank → its own time waiting for the last to arrive, per step


def collective_waits(steps_by_rank: dict[int, dict[int, StepFigures]], offsets: dict[int, float]) -> CollectiveWaits:
    """Match collectives across ranks (k-th of a name in a step) and book who waited for whom. `offsets`:
    rank → µs added to its trace's clock to give one clock."""
    ranks = sorted(steps_by_rank)
    held_up = dict.fromkeys(ranks, 0.0)
    waited = dict.fromkeys(ranks, 0.0)
    matched = unmatched = 0
    if len(ranks) < 2:
        return CollectiveWaits(0, 0, 0, held_up, waited)
    common = set.intersection(*(set(steps_by_rank[r]) for r in ranks))
    for n in sorted(common):
        groups: dict[int, dict[str, list[float]]] = {}
        for r in ranks:
            g: dict[str, list[float]] = defaultdict(list)
            for name, s, _e in steps_by_rank[r][n].collectives:
                g[name].append(s + offsets[r])
            groups[r] = g
        names = set().union(*(set(g) for g in groups.values()))
        for name in names:
            if P2P_RE.search(name):
                continue
            counts = {len(groups[r].get(name, [])) for r in ranks}
            if len(counts) != 1:
                unmatched += max(counts)
                continue
            for k in range(counts.pop()):
                starts = {r: groups[r][name][k] for r in ranks}
                last = max(starts, key=lambda r: starts[r])
                for r in ranks:
                    w = (starts[last] - starts[r]) * 1e-6
                    waited[r] += w
                    if r != last:
                        held_up[last] += w
                matched += 1
    per = max(len(common), 1)
    return CollectiveWaits(matched, unmatched, len(common), {r: v / per for r, v in held_up.items()},
                           {r: v / per for r, v in waited.items()})
