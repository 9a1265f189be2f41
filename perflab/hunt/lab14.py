"""Checks for labs/14_regression_hunt.ipynb: the hunt itself, graded on what was found and recovered.

The learner writes `read_evidence(ev)`, which gets the instruments' readings of a step
(`perflab.hunt.report.collect_evidence`: phase shares, counters, op calls per step) and returns
claims (category, evidence, fix). `check_read_evidence` runs it on steps of hidden draws composed
from recorded signatures (`perflab/hunt/data/signatures_smoke.json`): draws the learner never saw.
`check_report` runs it on the learner's own step and grades the report: the fixes are re-run in
the grader's own process (`perflab.hunt.report.grade`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from perflab.grading.checks import NOT_DONE, NOT_PASSED, Verdict, attempt, fail, record
from perflab.hunt.pool import NAMES, regression


def _key(draw: Any, name: str) -> str:
    import hashlib

    return hashlib.sha256(":".join((str(draw.seed), name)).encode()).hexdigest()[:12]


@dataclass
class Hunt:
    """A learner's hunt: their draw, the measured cost share of each drawn regression (keyed so that
    it names none of them), the step's evidence."""

    draw: Any
    shares: dict[str, float]
    sizes_name: str
    evidence: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, draw: Any, costs: dict[str, Any], sizes_name: str, evidence: dict[str, Any]) -> Hunt:
        """From name → cost (a `Cost` or a share): kept only for the drawn regressions, keyed."""
        from perflab.hunt.draw import reveal_draw

        shares = {_key(draw, n): float(getattr(costs[n], "share", costs[n])) for n in reveal_draw(draw)}
        return cls(draw, shares, sizes_name, evidence)

    def costs(self) -> dict[str, float]:
        """Name → measured cost share of each drawn regression (what the grader needs)."""
        from perflab.hunt.draw import reveal_draw

        return {n: self.shares[_key(self.draw, n)] for n in reveal_draw(self.draw)}

    @property
    def sizes(self):
        from perflab.hunt.report import sizes_named

        return sizes_named(self.sizes_name)


def start(smoke: bool = False, user: str | None = None, k: int | None = None, pool=None,
          progress: Callable[[str], None] | None = print) -> Hunt:
    """Draw this learner's regressions (measuring each candidate's cost here as the draw reaches it,
    so one that costs nothing on this machine is redrawn), then read their step's evidence."""
    from perflab.hunt.draw import draw_for
    from perflab.hunt.report import collect_evidence, sizes_named
    from perflab.hunt.step import measure_cost

    name = "smoke" if smoke else "lesson"
    sz = sizes_named(name)
    costs: dict[str, Any] = {}

    def cost(n: str):
        c = measure_cost(n, sz, reps=1 if smoke else 3)
        costs[n] = c
        if progress:
            progress(f"measured one candidate of your draw ({len(costs)} so far)")
        return c

    if pool is None:  # `perflab hunt --learners` draws from the same pool
        from perflab.hunt.draw import lesson_pool

        pool = lesson_pool(smoke)
    d = draw_for(user, k, pool, costs=cost)
    s = d.step(sizes=sz)
    try:
        ev = collect_evidence(s)
    finally:
        s.close()
    return Hunt.of(d, costs, name, ev)


def evidence_table(ev: dict[str, Any], step_time: bool = True):
    """The evidence as two small tables a person reads: phases and counters. `step_time=False` leaves
    the step's time out, where a figure beside it already shows the step timed (one step, one number)."""
    import pandas as pd

    from perflab.core.readout import percent, seconds

    phases = pd.DataFrame([{"phase": p, "share of the step": percent(v)} for p, v in ev["shares"].items()])
    c = ev["counters"]
    counters = pd.DataFrame(([{"counter": "step time", "value": seconds(ev["step_s"])}] if step_time else []) + [
        {"counter": "intra-op threads / usable cores", "value": f"{c['threads']} / {c['usable_cores']}"},
        {"counter": "gen-2 collections per step", "value": f"{c['gen2_per_step']:.2g}"},
        {"counter": "data wait, epoch's first step", "value": seconds(c["data_wait_epoch_first_s"])},
        {"counter": "data wait, other steps", "value": seconds(c["data_wait_other_s"])},
        {"counter": "DataLoader workers", "value": str(c["loader_workers"])},
        {"counter": "worker processes started per epoch (after the first)", "value": f"{c['worker_starts_per_epoch']:.2g}"},
    ])
    return phases, counters


def top_ops_table(ev: dict[str, Any], n: int = 8):
    """The profiled step's top ops by time: name, calls, time (with its unit)."""
    import pandas as pd

    from perflab.core.readout import seconds

    return pd.DataFrame([{"op": r["op"], "calls": r["calls"], "time": seconds(r["total_ms"] / 1e3)}
                         for r in ev.get("top_ops", [])[:n]])


def op_calls_table(ev: dict[str, Any], clean: dict[str, Any] | None = None, n: int = 12):
    """`ev["op_calls"]` as a table a person reads: the ops called most in the profiled step, and with
    `clean` (another step's evidence) that step's count beside each and every op whose count differs."""
    import pandas as pd

    calls = ev.get("op_calls", {})
    names = sorted(calls, key=lambda k: (-calls[k], k))[:n]
    if clean is not None:
        base = clean.get("op_calls", {})
        names += sorted(k for k in set(calls) | set(base) if calls.get(k, 0) != base.get(k, 0) and k not in names)
        return pd.DataFrame([{"op": k, "calls": calls.get(k, 0), "clean step": base.get(k, 0)} for k in names])
    return pd.DataFrame([{"op": k, "calls": calls[k]} for k in names])


def describe(hunt: Hunt) -> str:
    """One line about the draw that names none of its regressions."""
    return f"your draw: {hunt.draw.k} hidden regression{'s' if hunt.draw.k != 1 else ''} (token {hunt.draw.token[:10]}…)"


def _hidden_draws(n: int = 8, seed: int = 14) -> list[tuple[str, ...]]:
    """Every pool member alone, then `n` draws of three (any member can be drawn on some machine)."""
    kept = list(NAMES)
    rng = random.Random(seed)
    out: list[tuple[str, ...]] = [(r,) for r in kept]
    while len(out) < len(kept) + n:
        pick: list[str] = []
        for r in rng.sample(kept, len(kept)):
            if len(pick) == 3:
                break
            if not any(r in regression(p).conflicts or p in regression(r).conflicts for p in pick):
                pick.append(r)
        out.append(tuple(pick))
    return out


def _categories(claims) -> set[str]:
    from perflab.hunt.report import parse_claims

    return {c.category for c in parse_claims(claims)}


def check_read_evidence(student: Callable[[dict[str, Any]], Any], draws: list[tuple[str, ...]] | None = None) -> Verdict:
    """Run `read_evidence` on hidden draws' evidence (`draws`, default eight drawn with the lab's own
    seed): its categories must be exactly the planted ones."""
    from perflab.core.errors import InputError
    from perflab.hunt.report import load_signatures, synthetic_evidence

    name = "read_evidence"
    sig = load_signatures()
    draws = _hidden_draws() if draws is None else draws
    for i, planted in enumerate(draws):
        ev = synthetic_evidence(planted, sig)
        got = attempt(name, student, ev, what=f"hidden draw {i + 1}")
        if got is NOT_DONE:
            return NOT_PASSED
        try:
            cats = _categories(got)
        except InputError as e:
            raise fail(name, f"on hidden draw {i + 1}: {e}") from None
        want = {regression(p).category for p in planted}
        missed, extra = sorted(want - cats), sorted(cats - want)
        if missed:
            r = next(p for p in planted if regression(p).category == missed[0])
            raise fail(name, f"hidden draw {i + 1} has a planted {missed[0]!r} you did not claim. "
                                f"Hint: {regression(r).instrument} shows it ({regression(r).evidence})")
        if extra:
            raise fail(name, f"hidden draw {i + 1}: you claimed {extra[0]!r}, which is not planted there. "
                                "Hint: claim a cause only where its own instrument shows it, not every suspect: "
                                "a wrong claim lowers your precision")
    print(f"✓ {name}: the planted causes, and only they, on {len(draws)} hidden draws")
    return record(name, True)


def check_report(student: Callable[[dict[str, Any]], Any], hunt: Hunt) -> Verdict:
    """Your claims on your own step, graded in the grader's own process: precision, recall, each
    fix's recovery (at least half of its regression's measured cost) and parity."""
    from perflab.core.errors import InputError
    from perflab.hunt.report import grade

    name = "report"
    got = attempt(name, student, hunt.evidence, what="your step's evidence")
    if got is NOT_DONE:
        return NOT_PASSED
    reps = hunt.sizes.reps  # the rounds of the lesson's own comparisons: 2 in smoke mode, 3 otherwise
    try:
        g = grade(got, hunt.draw, hunt.costs(), sizes_name=hunt.sizes_name, reps=reps)
        if not g.passed and g.precision == 1.0 and g.recall == 1.0 and g.parity_ok and not g.model_changes:
            # every cause named with its own switch, yet a fix measured short: a burst of load from other
            # programs can do that, so the grader measures once more, longer, before it fails the report
            g = grade(got, hunt.draw, hunt.costs(), sizes_name=hunt.sizes_name, reps=reps + 2)
    except InputError as e:
        raise fail(name, f"{e}") from None
    print(g)
    if not g.passed:
        raise fail(name, f"score {g.score:.2f}, below the {0.75:.2f} that passes. Hint: "
                            + ("a fix that changes the model is not a fix" if g.model_changes else
                               "claim only what the evidence shows, and turn back each cause's own switch"))
    return record(name, True)


def reveal(hunt: Hunt):
    """After the checks: your draw, each regression's measured cost and its instrument."""
    import pandas as pd

    from perflab.core.readout import percent
    from perflab.hunt.draw import reveal_draw

    costs = hunt.costs()
    return pd.DataFrame([{"regression": n, "category": regression(n).category,
                          "cost here": percent(costs[n]),
                          "instrument": regression(n).instrument} for n in reveal_draw(hunt.draw)])


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
LEARNER_ANSWERS = ("read_evidence",)
REFERENCES: dict = {}  # no formula: the planted causes of each hidden draw are the answer
def _forbidden() -> tuple:
    """What composes evidence from causes (a brute force over the causes would read it backwards)."""
    from perflab.hunt import report

    return (report.synthetic_evidence, report.load_signatures, report.record_signatures)


FORBIDDEN = _forbidden()


def judge(answers, rng) -> None:
    """`read_evidence` on hidden draws drawn for this learner by the grader (evidence composed from the
    recorded signatures): exactly the planted causes on each; then the report, on a step the grader
    draws and measures itself (smoke sizes), its fixes re-run here (`check_report`)."""
    if check_read_evidence(answers["read_evidence"], _hidden_draws(seed=rng.randint(0, 2**31))):
        hunt = start(smoke=True, user=f"graded-{rng.randint(0, 2**31)}", progress=None)
        check_report(answers["read_evidence"], hunt)
