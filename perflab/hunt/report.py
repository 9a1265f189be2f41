"""The learner's report, graded: what they claim, what they saw, the switch they turn back.

    >>> ev = collect_evidence(draw.step())      # the instruments' readings of one step (no answers in it)
    >>> claims = [Claim("gc_full_collections", "2 gen-2 collections per step", "no_gc_in_step"), ...]
    >>> g = grade(claims, draw, costs)          # re-runs the step with the fixes, in a process of its own
    >>> g.score, g.precision, g.recall, g.passed

Scoring (`score_of`):

* a claim is *right* when its category is one of the planted regressions' (precision = right claims
  / claims; recall = planted regressions claimed / planted);
* a planted regression counts in full when a right claim's fix recovers at least `RECOVER_SHARE`
  (half) of that regression's cost, both measured in the grader's process (a full collection's
  cost depends on the process's heap, so the two must come from one process); where that run
  measures the regression's own cost below `KEEP_SHARE` (a burst of load from other programs can
  hide a small cost), the recovery cannot be judged and the regression's own switch counts, with the loss within fp32's tolerance of the clean
  step's; a right category with a fix that does not recover counts half;
* score = (credited regressions / planted) × precision, minus `MODEL_PENALTY` for each fix that
  changes the model (`perflab.hunt.pool.MODEL_FIXES`) and `PARITY_PENALTY` when the fixed step's
  loss leaves parity; at least 0. A report passes at `PASS_SCORE`.

Claiming every category gives precision k / (number of claims), so with 3 of 9 it scores at most
1/3: a careful hunt that names the 3 right causes scores 1.

The evidence (`collect_evidence`, `synthetic_evidence`) is a JSON document, by design: it is what the
learner's `read_evidence(ev)` reads (ev["counters"]["gen2_per_step"], ev["op_calls"], ...), the same
shape as the recorded signatures file it is composed from. It is made once, from the instruments'
typed readings (`perflab.hunt.step.Counters`, `Profiled`), at that edge.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perflab.core.errors import InputError, PerflabError
from perflab.core.jsonable import JSON, to_json
from perflab.hunt.pool import ALL_FIXES, CATEGORIES, KEEP_SHARE, MODEL_FIXES, POOL, regression

if TYPE_CHECKING:
    from perflab.hunt.step import Timed

RECOVER_SHARE = 0.5  # a fix must win back at least half of its regression's measured cost
MODEL_PENALTY = 0.25  # per fix that changes the model
PARITY_PENALTY = 0.5  # when the fixed step's loss leaves the tolerance
PASS_SCORE = 0.75


@dataclass(frozen=True)
class Claim:
    category: str  # one of CATEGORIES
    evidence: str  # what the learner saw: an op and its calls, a share, a counter
    fix: str  # one of ALL_FIXES


def parse_claims(claims: Iterable[Any]) -> list[Claim]:
    """Claims from Claim objects, dicts ({'category', 'evidence', 'fix'}) or (category, evidence, fix)
    tuples; a bad one raises InputError in one line."""
    out = []
    for i, c in enumerate(claims):
        if isinstance(c, Claim):
            cl = c
        elif isinstance(c, Mapping):
            cl = Claim(str(c.get("category", "")), str(c.get("evidence", "")), str(c.get("fix", "")))
        elif isinstance(c, Sequence) and not isinstance(c, str) and len(c) == 3:
            cl = Claim(*(str(x) for x in c))
        else:
            raise InputError(f"claim {i + 1} is {c!r}: write each claim as Claim(category, evidence, fix)")
        cat, fix = cl.category.strip().lower(), cl.fix.strip().lower()
        if cat not in CATEGORIES:
            raise InputError(f"claim {i + 1}: unknown category {cl.category!r}: choose from {', '.join(CATEGORIES)}")
        if fix not in ALL_FIXES:
            raise InputError(f"claim {i + 1}: unknown fix {cl.fix!r}: choose from {', '.join(ALL_FIXES)}")
        if len(cl.evidence.strip()) < 8:
            raise InputError(f"claim {i + 1} ({cat}): say what you saw as evidence (an op and its calls, a share, "
                             "a counter), not an empty line")
        out.append(Claim(cat, cl.evidence.strip(), fix))
    return out


# ---------------------------------------------------------------- evidence


def collect_evidence(step, epochs: int = 1) -> JSON:
    """The instruments' readings of `step` (a `perflab.hunt.step.HuntStep`), after one warm-up epoch,
    as the learner reads them (module docstring): each phase's share of the step (the phase timer),
    the step time, the counters (threads, usable cores, gen-2 collections per step, the data wait on an
    epoch's first step and on the others) and one profiled step (op calls, the top ops by time, lesson
    09's diagnosis)."""
    from perflab.hunt.step import PHASES

    e = step.sizes.epoch_steps
    step.run(e)
    recs = step.run(e * epochs)
    total = statistics.mean(r["step"] for r in recs)
    shares = {p: statistics.mean(r[p] for r in recs) / total for p in PHASES}
    c = step.counters()
    prof = step.profile()
    return {"step_s": total, "shares": shares, "counters": to_json(c), "op_calls": prof.op_calls,
            "top_ops": to_json(prof.ops), "diagnosis": to_json(prof.diagnosis)}


def record_signatures(names: Sequence[str] | None = None, sizes=None) -> JSON:
    """The evidence of the clean step and of the step with each regression alone (`collect_evidence`),
    as one JSON-ready dict: what `synthetic_evidence` composes draws from."""
    from perflab.hunt.pool import NAMES
    from perflab.hunt.step import HuntStep

    out = {}
    for n in ("clean", *(names or NAMES)):
        s = HuntStep(() if n == "clean" else (n,), (), sizes)
        try:
            ev = collect_evidence(s)
        finally:
            s.close()
        ev.pop("top_ops", None)
        out[n] = ev
    return out


def load_signatures(name: str = "smoke") -> JSON:
    """The signatures recorded with `record_signatures` at the smoke sizes (perflab/hunt/data)."""
    from pathlib import Path

    return json.loads((Path(__file__).parent / "data" / f"signatures_{name}.json").read_text())


def synthetic_evidence(planted: Sequence[str], signatures: Mapping[str, Any]) -> JSON:
    """The evidence a step with all of `planted` on would give, composed from recorded signatures:
    each regression's extra seconds per phase, extra op calls and counters added to the clean step's.
    (Regressions that wait on different things add up; this is the model the tests hunt in.)"""
    from perflab.hunt.step import PHASES

    clean = signatures["clean"]
    secs = {p: clean["shares"][p] * clean["step_s"] for p in PHASES}
    calls = dict(clean["op_calls"])
    counters = dict(clean["counters"])
    for n in planted:
        sig = signatures[n]
        for p in PHASES:
            secs[p] += max(0.0, sig["shares"][p] * sig["step_s"] - clean["shares"][p] * clean["step_s"])
        for op in set(sig["op_calls"]) | set(clean["op_calls"]):
            calls[op] = calls.get(op, 0) + sig["op_calls"].get(op, 0) - clean["op_calls"].get(op, 0)
        for key in ("threads", "gen2_per_step", "loader_workers"):
            if sig["counters"].get(key) != clean["counters"].get(key):
                counters[key] = sig["counters"][key]
        for key in ("data_wait_epoch_first_s", "data_wait_other_s", "worker_starts_per_epoch"):
            counters[key] = (counters.get(key) or 0.0) + max(0.0, (sig["counters"].get(key) or 0.0)
                                                              - (clean["counters"].get(key) or 0.0))
    total = sum(secs.values())
    return {"step_s": total, "shares": {p: secs[p] / total for p in PHASES}, "counters": counters,
            "op_calls": {k: v for k, v in calls.items() if v > 0}, "diagnosis": {}}


# ---------------------------------------------------------------- recovery


@dataclass
class Recovery:
    """The grader's re-run: the clean and the fixed step's seconds, what each claimed fix of a planted
    regression won back and each such regression's own cost (both shares of the clean step), parity."""

    clean_s: float
    fixed_s: float
    recovered: dict[str, float] = field(default_factory=dict)  # fix → what leaving it out costs
    costs: dict[str, float] = field(default_factory=dict)  # planted regression → its cost in this run
    parity_ok: bool = True  # the fixed step's loss within fp32's tolerance of the clean step's
    loss_rel: float = 0.0  # their relative difference


def measure_recovery(planted: Sequence[str], fixes: Sequence[str], sizes=None, *, reps: int = 3) -> Recovery:
    """Time, in turns: the clean step, the step with every claimed fix, and for each claimed fix of a
    planted regression, the step with every claimed fix but that one. A fix's recovery is what
    leaving it out costs, as a share of the clean step. Parity: the fixed step's loss against the
    clean step's (the same number of steps)."""
    from perflab.hunt.step import HuntStep, interleaved, parity

    fixes = list(dict.fromkeys(fixes))
    useful = [f for f in fixes if any(regression(p).fix == f for p in planted)]
    configs = {"clean": lambda: HuntStep((), (), sizes), "fixed": lambda: HuntStep(planted, fixes, sizes)}
    for f in useful:
        configs[f"without:{f}"] = lambda f=f: HuntStep(planted, [x for x in fixes if x != f], sizes)
    fixed_by = [p for p in planted if regression(p).fix in useful]
    for p in fixed_by:  # the regression's cost in this same process (a collection's cost depends on the heap)
        configs[f"only:{p}"] = lambda p=p: HuntStep((p,), (), sizes)
    t = interleaved(configs, reps=reps)
    clean = t["clean"].step_s
    ok, rel = parity(t["fixed"].loss, t["clean"].loss)
    return Recovery(clean, t["fixed"].step_s,
                    {f: (t[f"without:{f}"].step_s - t["fixed"].step_s) / clean for f in useful},
                    {p: t[f"only:{p}"].step_s / clean - 1 for p in fixed_by}, ok, rel)


def measure_recovery_in_process(planted: Sequence[str], fixes: Sequence[str], sizes_name: str = "lesson", *,
                                reps: int = 3, timeout: float = 300.0) -> Recovery:
    """`measure_recovery` in a fresh Python process (the grader's own: nothing the learner's kernel
    changed reaches it)."""
    payload = json.dumps({"planted": list(planted), "fixes": list(fixes), "sizes": sizes_name, "reps": reps})
    try:
        p = subprocess.run([sys.executable, "-m", "perflab.hunt.report"], input=payload, capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PerflabError(f"the grader's re-run took more than {timeout:.0f} s: try again on a quieter machine") from None
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["no message"])[-1]
        raise PerflabError(f"the grader's re-run failed: {last}")
    return Recovery(**json.loads(p.stdout.strip().splitlines()[-1]))


def sizes_named(name: str):
    """The hunt's sizes called `name` ('lesson' or 'smoke'): `perflab.hunt.sizes.named`."""
    from perflab.hunt.sizes import named

    return named(name)


@dataclass
class Rerun:
    """The step as drawn (with the fixes adopted before) and with the new fixes too, timed in turns."""

    timed: dict[str, Timed]  # 'before', 'with your fixes' → each one timed
    before_s: float
    after_s: float
    recovered_share: float  # of the as-drawn step
    parity_ok: bool  # the fixed step's loss within fp32's tolerance of the as-drawn step's
    loss_rel: float

    @property
    def quietness(self):
        """The machine's while both were timed (`perflab.core.quietness.Quietness`)."""
        return self.timed["before"].quietness

    def headline(self) -> float | None:
        """The share recovered, or None when the machine was busy while it was timed (no verdict then)."""
        return None if self.quietness.disturbed else self.recovered_share

    def text(self, what: str = "the step as given") -> str:
        """Parity against `what`, and the share recovered, or why it is not told (a busy machine)."""
        from perflab.core.verdicts import busy_text

        won = (f"won back {self.recovered_share:.0%} of the step" if not self.quietness.disturbed
               else busy_text(self.quietness.cause) + ": run it again when the machine is quiet")
        return (f"{won}; parity: loss within fp32's tolerance of {what}: {self.parity_ok} "
                f"(relative difference {self.loss_rel:.1e})")


def rerun(planted: Sequence[str] | Any, fixes: Sequence[str], sizes=None, *, reps: int = 2,
          before: Sequence[str] = ()) -> Rerun:
    """The step as drawn (with the fixes `before`, already adopted) and with `fixes` too, timed in
    turns: each one's step time and phases, the share of the as-drawn step that the new fixes
    recovered, and parity of the fixed step's loss against the as-drawn step's."""
    from perflab.hunt.draw import Draw, reveal_draw
    from perflab.hunt.step import HuntStep, interleaved, parity

    names = list(reveal_draw(planted)) if isinstance(planted, Draw) else list(planted)
    fixes, before = list(dict.fromkeys(fixes)), list(before)
    t = interleaved({"before": lambda: HuntStep(names, before, sizes),
                     "with your fixes": lambda: HuntStep(names, list(dict.fromkeys(before + fixes)), sizes)}, reps=reps)
    ok, rel = parity(t["with your fixes"].loss, t["before"].loss)
    b, a = t["before"].step_s, t["with your fixes"].step_s
    return Rerun(dict(t), b, a, (b - a) / b, ok, rel)


# ---------------------------------------------------------------- the grade


@dataclass
class GradedClaim:
    """One claim, graded: whether its category was planted, what its fix won back (a share of the
    regression's own cost in the grader's run) against what was needed, and the verdict in words."""

    category: str
    evidence: str
    fix: str
    right: bool
    recovered: float | None = None  # None for a claim whose category was not planted
    needed: float | None = None
    verdict: str = ""


@dataclass
class Graded:
    rows: list[GradedClaim]
    planted: list[str]
    precision: float
    recall: float
    credited: float
    model_changes: list[str]
    parity_ok: bool
    score: float
    recovery: Recovery | None = None

    JSON_EXTRA = ("passed",)

    @property
    def passed(self) -> bool:
        return self.score >= PASS_SCORE

    def as_dict(self) -> JSON:
        return to_json(self)

    def frame(self):
        import pandas as pd

        return pd.DataFrame([{k: getattr(r, k) for k in ("category", "right", "fix", "recovered", "needed", "verdict")}
                             for r in self.rows])

    def __str__(self) -> str:
        lines = [f"score {self.score:.2f} (pass at {PASS_SCORE:.2f}): precision {self.precision:.2f}, "
                 f"recall {self.recall:.2f}, parity {'kept' if self.parity_ok else 'BROKEN'}"]
        for r in self.rows:
            lines.append(f"  {r.category:<24} {r.verdict}")
        if self.model_changes:
            lines.append(f"  fixes that change the model: {', '.join(self.model_changes)} "
                         f"(−{MODEL_PENALTY:.2f} each)")
        return "\n".join(lines)

    __repr__ = __str__


def score_of(claims: Sequence[Claim], planted: Sequence[str], costs: Mapping[str, float],
             recovery: Recovery) -> Graded:
    """Grade `claims` against the `planted` regressions, each regression's measured cost share
    (`costs`) and the measured `recovery` (`measure_recovery`'s result)."""
    planted = list(planted)
    by_cat = {regression(p).category: p for p in planted}
    rec = recovery.recovered
    parity_ok = bool(recovery.parity_ok)
    rows, credit = [], {}
    for c in claims:
        p = by_cat.get(c.category)
        row = GradedClaim(c.category, c.evidence, c.fix, p is not None)
        applies = c.fix in MODEL_FIXES or any(regression(q).fix == c.fix for q in planted)
        if p is None:
            row.verdict = "not planted (a wrong claim)" + ("" if applies else f"; the fix {c.fix} changes nothing "
                                                                           "in this step")
        else:
            here = recovery.costs.get(p)
            cost = float(costs[p] if here is None else here)
            need = RECOVER_SHARE * cost
            own = c.fix == regression(p).fix
            got = float(rec.get(c.fix, 0.0)) if own else 0.0
            # shown as shares of the regression's own cost in this run (the threshold stays "half", whatever
            # the run measured), never as shares of the clean step (a regression can cost several steps)
            row.recovered, row.needed = (got / cost if cost > 0 else 0.0), RECOVER_SHARE
            unjudged = here is not None and cost < KEEP_SHARE and own  # too small in this run to judge a recovery
            ok = (got >= need or unjudged) and parity_ok
            credit[p] = max(credit.get(p, 0.0), 1.0 if ok else 0.5)
            won = _of_cost(got, cost)
            row.verdict = (f"planted, but the fix {c.fix} changes nothing in this step" if not applies else
                              f"planted; its own switch turned back (this re-run measured its cost at {cost:.1%} "
                              f"of the clean step, below the {KEEP_SHARE:.0%} where a recovery can be judged; "
                              "a busy machine can hide a cost)" if unjudged and ok else
                              f"planted; the fix won back {won} of its cost (needed half)" if ok else
                              f"planted, but the fix won back {won} of its cost, below the half needed"
                              + ("" if parity_ok else ", or parity broke"))
        rows.append(row)
    right = sum(r.right for r in rows)
    precision = right / len(rows) if rows else 0.0
    recall = len(credit) / len(planted) if planted else 0.0
    credited = sum(credit.values()) / len(planted) if planted else 0.0
    model = sorted({c.fix for c in claims if c.fix in MODEL_FIXES})
    score = credited * precision - MODEL_PENALTY * len(model) - (0.0 if parity_ok else PARITY_PENALTY)
    return Graded(rows, planted, precision, recall, credited, model, parity_ok, max(0.0, score), recovery)


def _of_cost(got: float, cost: float) -> str:
    """What a fix won back as a share of its regression's cost, both measured in one run: 'all' from
    100 % up (the two are timed apart, so noise can put the recovery a little past the cost)."""
    if cost <= 0:
        return "none"
    share = got / cost
    return "all" if share >= 1 else ("none" if share <= 0 else f"{share:.0%}")


def grade(claims: Iterable[Any], planted: Sequence[str] | Any, costs: Mapping[str, Any], *, sizes_name: str = "lesson",
          reps: int = 3, in_process: bool = False) -> Graded:
    """Parse the claims, re-run the step with their fixes (in a process of its own unless
    `in_process`), and score them. `planted`: the names, or a `perflab.hunt.draw.Draw`.
    `costs`: each planted regression's measured cost (a share, or a `Cost`)."""
    from perflab.hunt.draw import Draw, reveal_draw

    cl = parse_claims(claims)
    names = list(reveal_draw(planted)) if isinstance(planted, Draw) else [regression(p).name for p in planted]
    shares = {p: _share(costs.get(p)) for p in names}
    missing = [p for p in names if shares[p] is None]
    if missing:
        raise InputError(f"no measured cost for {', '.join(missing)}: measure the costs first (measure_costs)")
    fixes = [c.fix for c in cl]
    if in_process:
        recovery = measure_recovery(names, fixes, sizes_named(sizes_name), reps=reps)
    else:
        recovery = measure_recovery_in_process(names, fixes, sizes_name, reps=reps)
    return score_of(cl, names, {p: float(s) for p, s in shares.items() if s is not None}, recovery)


def _share(c: Any) -> float | None:
    if c is None:
        return None
    if isinstance(c, int | float):
        return float(c)
    if isinstance(c, Mapping):
        return float(c["share"])
    return float(c.share)


ALL_CATEGORIES = CATEGORIES
POOL_CATEGORIES = tuple(r.category for r in POOL)


def _main() -> int:
    import warnings

    warnings.simplefilter("ignore")
    req = json.loads(sys.stdin.read())
    out = measure_recovery(req["planted"], req["fixes"], sizes_named(req["sizes"]), reps=int(req.get("reps", 3)))
    print(json.dumps(to_json(out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
