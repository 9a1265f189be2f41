"""Checks for labs/11_capstone.ipynb: plan a ladder that beats the baseline with parity kept.

The learner is given a preset's memory budget and a target speed-up, and writes
* `plan`: the rungs to apply, in order (names from `perflab.tune.ladder.RUNG_NAMES`);
* a prediction of each rung's gain (its speed-up over the step before it) before the plan runs,
  through `perflab.course.predict` (a box per rung, or the papermill `predictions` parameter).

`check_plan(plan, predictions)` checks the plan before anything runs; `check_result(plan, result,
target=..., budget=..., reference=...)` grades what was measured: the ladder did not stop on a
parity failure, the configuration it ends with is at least `target` times faster than the baseline
and its peak memory fits the budget. It then says which rung the plan left out that was worth the
most here, and how much, from `reference` (the whole ladder measured on the same preset).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perflab.core.errors import InputError
from perflab.grading.checks import LabCheckError, inconclusive, record
from perflab.tune.ladder import RUNG_NAMES, parse_rungs


def _not_done(name: str) -> bool:
    record(name, False)
    print(f"… {name}: not done yet — write your plan in the cell above and run it again.")
    return False


def _passed(name: str, what: str) -> bool:
    record(name, True)
    print(f"✓ {name}: {what}")
    return True


def check_plan(plan: Sequence[str] | None, predictions: Mapping[str, Any] | None) -> bool:
    """The plan names known rungs, each once, at least one beyond the baseline, and every rung in it
    has a predicted gain (a number > 0: its speed-up over the step before it) written before it runs."""
    name = "your plan"
    if plan is None:
        return _not_done(name)
    if isinstance(plan, str) or not isinstance(plan, Sequence):
        raise LabCheckError(f"{name}: plan must be a list of rung names such as ['sdpa', 'batch'], got "
                            f"{type(plan).__name__}")
    try:
        rungs = parse_rungs(list(plan))
    except InputError as e:
        raise LabCheckError(f"{name}: {e}") from None
    if len(rungs) < 2:
        raise LabCheckError(f"{name}: the plan applies no rung beyond the baseline: choose rungs from "
                            f"{', '.join(RUNG_NAMES[1:])}")
    preds = dict(predictions or {})
    missing = [r for r in rungs[1:] if preds.get(r) is None]
    if missing:
        raise LabCheckError(f"{name}: no prediction for {', '.join(missing)}: predict each rung's speed-up over the "
                            "step before it (1.0 = no change) before it runs")
    for r in rungs[1:]:
        v = preds[r]
        if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
            raise LabCheckError(f"{name}: the prediction for {r!r} is {v!r}: write a speed-up factor > 0 "
                                "(1.2 = 20 % faster, 0.9 = 10 % slower)")
    return _passed(name, f"{len(rungs) - 1} rungs in order ({', '.join(rungs[1:])}), each with a prediction")


def left_on_the_table(plan: Sequence[str], reference) -> tuple[str, float] | None:
    """(rung, its speed-up over the step before it) of the rung the plan left out that helped most in
    `reference` (a whole ladder on the same preset), or None when the plan left out nothing that helped."""
    chosen = set(parse_rungs(list(plan)))
    best = None
    for r in reference.rows:
        if r["rung"] in chosen or not r.get("adopted") or r["rung"] == "baseline":
            continue
        gain = float(r.get("speedup_vs_previous") or 1.0)
        if best is None or gain > best[1]:
            best = (r["rung"], gain)
    return best


def check_result(plan: Sequence[str] | None, result, *, target: float, budget: int | None, reference=None) -> bool:
    """Grade the measured ladder of `plan`: parity on every rung, the target speed-up, the budget."""
    name = "beat the baseline"
    if plan is None or result is None:
        return _not_done(name)
    rungs = parse_rungs(list(plan))
    measured = [r["rung"] for r in result.rows]
    if tuple(measured) != rungs[: len(measured)] or not measured:
        raise LabCheckError(f"{name}: the result measured {measured}, not your plan {list(rungs)}: run the plan's "
                            "cell again after changing it")
    table = ""
    if reference is not None:
        lot = left_on_the_table(rungs, reference)
        table = (f" Left on the table: {lot[0]!r}, worth {lot[1]:.2f}× over the step before it in the whole "
                 "ladder here." if lot else " The plan left out no rung that helped in the whole ladder here.")
    if result.stopped:
        raise LabCheckError(f"{name}: the ladder stopped: {result.stopped}")
    bad = [r for r in result.rows if r.get("measured") and not r.get("parity_ok")]
    if bad:
        r = bad[0]
        raise LabCheckError(f"{name}: rung {r['rung']!r} moved the loss by {r['loss_rel']:.1e} (relative), beyond "
                            f"{r['tolerance']:.0e}: a faster step that trains a different model does not count")
    if len(measured) < len(rungs):
        raise LabCheckError(f"{name}: only {len(measured)} of {len(rungs)} rungs were measured: run the plan again "
                            "(it resumes)")
    final = result.final
    if budget is not None and final["peak_bytes"] > budget:
        raise LabCheckError(f"{name}: the configuration you end with ({final['rung']}) peaks at "
                            f"{final['peak_bytes'] / 2**20:.1f} MiB, over the {budget / 2**20:.1f} MiB budget: a rung "
                            "that needs more memory than you have is not a speed-up you can keep")
    sp = float(final["speedup_vs_baseline"])
    if sp < target:
        undecided = [r["rung"] for r in result.rows if r.get("verdict") == "inconclusive"]
        busy = any(r.get("busy") for r in result.rows if r.get("verdict") == "inconclusive")
        why = ("the machine was busy: other programs used the cores while it was timed" if busy else
               "the machine was too noisy to tell within the rung's time budget")
        noisy = (f" {', '.join(undecided)} stayed inconclusive ({why}): run the cell again when the machine is "
                 "quieter, with `runner.run_ladder(..., fresh=True)` to measure again." if undecided else "")
        if busy:  # no verdict from a disturbed measurement, either way
            return inconclusive(name, f"your ladder ends {sp:.2f}× faster than the baseline (target {target:g}×), "
                                      f"but{noisy}")
        raise LabCheckError(f"{name}: your ladder ends {sp:.2f}× faster than the baseline; the target is {target:g}×."
                            + noisy + (table or " Add the rungs that attack the baseline's largest waterfall "
                                                "categories."))
    return _passed(name, f"{sp:.2f}× the baseline (target {target:g}×), parity kept on every rung, peak "
                         f"{final['peak_bytes'] / 2**20:.1f} MiB" + (f" of {budget / 2**20:.1f} MiB" if budget else "")
                   + "." + table)


# ---------------------------------------------------------------- reading an audit (perflab audit)


def largest_lever(audit: Mapping[str, Any]) -> tuple[str, list[str]]:
    """(part, rungs) of an audit's largest lever: of the parts of the step's time that the rungs it
    recommends act on (`perflab.tune.levers`), the one holding the most seconds, and the recommended
    rungs that act on it (any of them is the answer)."""
    from perflab.tune.levers import ACTS_ON

    bd = dict(audit["breakdown_s"])
    recs = [r["rung"] for r in audit["recommendations"]]
    parts = {p for r in recs for p in ACTS_ON.get(r, ())}
    if not parts:
        raise LabCheckError("the audit recommends no rung: audit another step")
    part = max(parts, key=lambda p: bd.get(p, 0.0))
    return part, [r for r in recs if part in ACTS_ON.get(r, ())]


def check_largest_lever(answer: str | None, audit: Mapping[str, Any]) -> bool:
    """The rung the learner names is the audit's largest lever (see `largest_lever`)."""
    from perflab.tune.levers import ACTS_ON, PARTS

    name = "the audit's largest lever"
    if answer is None:
        record(name, False)
        print(f"… {name}: not done yet — name the rung in the cell above and run it again.")
        return False
    if not isinstance(answer, str):
        raise LabCheckError(f"{name}: write the rung's name as a string, such as 'adamw' (got {type(answer).__name__})")
    key = answer.strip().lower()
    bd = dict(audit["breakdown_s"])
    recs = [r["rung"] for r in audit["recommendations"]]
    part, rungs = largest_lever(audit)
    ms = ", ".join(f"{p} {bd.get(p, 0.0) * 1e3:.3g} ms" for p in PARTS)
    if key in PARTS:
        raise LabCheckError(f"{name}: {key!r} is a part of the step's time, not a lever: name the rung the audit "
                            "recommends that acts on the largest part (its 'why' says which part each acts on)")
    if key not in ACTS_ON:
        raise LabCheckError(f"{name}: {answer!r} is not a rung the audit could recommend: choose from {', '.join(recs)}")
    if key not in recs:
        raise LabCheckError(f"{name}: the audit does not recommend {key!r} for this step (it does not apply here): "
                            f"choose among {', '.join(recs)}")
    if key not in rungs:
        acts = " + ".join(p.replace("_", " ") for p in ACTS_ON[key])
        raise LabCheckError(f"{name}: {key!r} acts on {acts}, not the largest part a recommended rung can act on. "
                            f"Look at breakdown_s ({ms}): which part holds the most time?")
    return _passed(name, f"{key!r} acts on {part.replace('_', ' ')}, {bd[part] * 1e3:.3g} ms of a "
                         f"{audit['step_s'] * 1e3:.3g} ms step: the most any recommended rung can save")


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
LEARNER_ANSWERS = ("plan", "my_predictions", "largest_lever")
REFERENCES: dict = {}
MEASURES = ("run_ladder", "plan")  # the call that measures the plan: each prediction is written before it


def judge(answers, rng, *, preset: str = "smoke") -> None:
    """The plan and its predictions read from the notebook's source, which the grader reads as
    submitted: each prediction a literal number, written in a cell before the first cell that
    measures (a prediction the notebook computes or writes after its measurement is not one); then
    the plan measured here, on the smoke preset, against the target and the budget."""
    from perflab.tune import ladder, runner

    plan = answers.value("plan")
    preds = answers.value("my_predictions")
    name = "your plan"
    where = getattr(answers, "where", {})
    literal = getattr(answers, "literal", lambda n: True)
    first = getattr(answers, "first_cell_calling", lambda *a, **k: None)(MEASURES[0], using=MEASURES[1])
    if preds is not None:
        at = where.get("my_predictions")
        if not literal("my_predictions"):
            raise LabCheckError(f"{name}: my_predictions is computed, not written down: a prediction is a number "
                                "typed before the measurement runs")
        if first is not None and at is not None and at >= first:
            raise LabCheckError(f"{name}: my_predictions is written in cell {at}, after the measurement in cell "
                                f"{first}: a prediction must be written before its measurement runs")
    if not check_plan(plan, preds):
        return
    tp = ladder.preset(preset)
    budget = tp.memory_budget_bytes if tp.memory_budget_bytes is not None else runner.memory_budget(tp, _cpu())
    result = runner.run_ladder(tp, list(plan), device="cpu", steps=5, profile=False)
    check_result(plan, result, target=tp.target_speedup, budget=budget)
    lever = answers.value("largest_lever")
    measure = getattr(answers, "measure", None)  # measurements the grader makes in its own process
    if lever is not None and measure is not None:  # the audit exercise, against an audit measured there
        check_largest_lever(lever if isinstance(lever, str) else None, measure("slow_data_audit"))


def _cpu():
    import torch

    return torch.device("cpu")
