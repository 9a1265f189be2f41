"""Lab 11: the audit exercise (name an audit's largest lever; the wrong answers learners give are
rejected) and the check on a machine too noisy to decide (it says which rungs stayed inconclusive).
"""

from __future__ import annotations

import pytest

from perflab.grading import checks as grading
from perflab.grading.checks import LabCheckError
from perflab.tune import lab11, runner
from perflab.tune import lab11 as lab
from perflab.tune.runner import LadderResult

BUDGET = 40 * 2**20


def row(rung, speedup, *, prev=1.0, adopted=True, parity=True, peak=20 * 2**20, measured=True, applicable=True,
        loss_rel=0.0):
    return {"rung": rung, "step_s": 0.1 / speedup, "speedup_vs_baseline": speedup, "speedup_vs_previous": prev,
            "adopted": adopted, "parity_ok": parity, "peak_bytes": peak, "measured": measured,
            "applicable": applicable, "loss_rel": loss_rel, "tolerance": 1e-4, "loss": 6.0}


def result(*rows, stopped=None):
    return LadderResult("cpu", "test cpu", list(rows), stopped, "/dev/null")


REFERENCE = result(row("baseline", 1.0), row("bf16", 0.8, prev=0.8, adopted=False), row("adamw", 1.1, prev=1.1),
                   row("sdpa", 1.3, prev=1.18), row("batch", 1.7, prev=1.31), row("loader", 2.2, prev=1.29))


GOOD_PLAN = ["adamw", "sdpa", "batch", "loader"]


GOOD_PRED = {"adamw": 1.1, "sdpa": 1.2, "batch": 1.3, "loader": 1.2}


GOOD = result(row("baseline", 1.0), row("adamw", 1.1, prev=1.1), row("sdpa", 1.3, prev=1.18),
              row("batch", 1.7, prev=1.31), row("loader", 2.2, prev=1.29))


MUTANTS = [
    # (name, plan, predictions, result, hint the message must carry)
    ("a plan as one string", "sdpa,batch", GOOD_PRED, GOOD, "list of rung names"),
    ("a rung that does not exist", ["flash-attention"], {"flash-attention": 2.0}, GOOD, "unknown rung"),
    ("a rung named twice", ["sdpa", "sdpa"], {"sdpa": 1.2}, GOOD, "named twice"),
    ("only the baseline", ["baseline"], {}, GOOD, "no rung beyond the baseline"),
    ("no prediction written", GOOD_PLAN, {"adamw": 1.1}, GOOD, "no prediction for sdpa"),
    ("a prediction that is not a factor", GOOD_PLAN, {**GOOD_PRED, "batch": -2}, GOOD, "speed-up factor > 0"),
    ("too slow: only the rungs that do not help on a CPU", ["bf16", "numa"], {"bf16": 1.5, "numa": 1.1},
     result(row("baseline", 1.0), row("bf16", 0.8, prev=0.8, adopted=False),
            row("numa", 1.0, adopted=False, applicable=False, measured=False)),
     "Left on the table: 'batch', worth 1.31×"),
    ("a faster step that trains another model", GOOD_PLAN, GOOD_PRED,
     result(row("baseline", 1.0), row("adamw", 1.1), row("sdpa", 2.5, parity=False, loss_rel=3e-2), row("batch", 3.0),
            row("loader", 3.5)), "beyond 1e-04"),
    ("a ladder that stopped on parity", GOOD_PLAN, GOOD_PRED,
     result(row("baseline", 1.0), row("adamw", 1.1, parity=False), stopped="rung 'adamw' broke parity"),
     "broke parity"),
    ("a micro-batch over the memory budget", GOOD_PLAN, GOOD_PRED,
     result(row("baseline", 1.0), row("adamw", 1.1), row("sdpa", 1.3), row("batch", 1.7, peak=60 * 2**20),
            row("loader", 2.2, peak=60 * 2**20)), "over the 40.0 MiB budget"),
    ("the result of another plan", ["sdpa", "batch"], {"sdpa": 1.2, "batch": 1.3}, GOOD, "not your plan"),
]


def audit(**bd):
    parts = {"data_wait": 0.0, "host_sync": 0.0, "launch_overhead": 0.0, "optimizer": 0.0, "compute": 0.0, **bd}
    recs = [{"rung": r, "why": "", "measured_speedup": None, "parity_ok": None}
            for r in ("compile", "bf16", "loader", "adamw")]
    return {"step_s": sum(parts.values()), "breakdown_s": parts, "recommendations": recs}


STARVED = audit(data_wait=0.200, compute=0.050, launch_overhead=0.010, optimizer=0.005)


COMPUTE = audit(data_wait=0.020, compute=0.150, launch_overhead=0.010, optimizer=0.005)


def _row(rung, speedup, verdict):
    return {"rung": rung, "step_s": 0.1 / speedup, "speedup_vs_baseline": speedup, "speedup_vs_previous": speedup,
            "adopted": verdict == "adopted", "verdict": verdict, "parity_ok": True, "peak_bytes": 2**20,
            "measured": True, "applicable": True, "loss_rel": 0.0, "tolerance": 1e-4, "loss": 6.0}


def test_lab11_says_when_the_plan_is_only_partly_measured():
    from perflab.grading.checks import LabCheckError
    from perflab.tune import lab11

    row = {"rung": "baseline", "measured": True, "parity_ok": True, "step_s": 0.02, "speedup_vs_baseline": 1.0,
           "peak_bytes": 2**20, "adopted": False}
    part = runner.LadderResult("smoke", "cpu", [row], None, "t.jsonl", 1, 0)
    with pytest.raises(LabCheckError, match=r"only 1 of 2 rungs were measured: run the plan again"):
        lab11.check_result(["baseline", "adamw"], part, target=1.1, budget=None)


def test_the_stub_is_not_done(capsys):
    assert lab.check_plan(None, {}) is False
    assert lab.check_result(None, None, target=1.3, budget=BUDGET) is False
    assert "not done yet" in capsys.readouterr().out


def test_a_right_plan_passes_and_names_what_was_left_on_the_table(capsys):
    assert lab.check_plan(GOOD_PLAN, GOOD_PRED)
    assert lab.check_result(GOOD_PLAN, GOOD, target=1.3, budget=BUDGET, reference=REFERENCE)
    out = capsys.readouterr().out
    assert "2.20× the baseline" in out and "left out no rung that helped" in out
    partial = ["sdpa", "batch"]
    res = result(row("baseline", 1.0), row("sdpa", 1.2, prev=1.2), row("batch", 1.6, prev=1.33))
    assert lab.check_result(partial, res, target=1.3, budget=BUDGET, reference=REFERENCE)
    assert "Left on the table: 'loader', worth 1.29×" in capsys.readouterr().out


@pytest.mark.parametrize("name,plan,pred,res,hint", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_a_wrong_answer_is_rejected_with_a_hint(name, plan, pred, res, hint):
    with pytest.raises(LabCheckError) as e:
        lab.check_plan(plan, pred)
        lab.check_result(plan, res, target=1.3, budget=BUDGET, reference=REFERENCE)
    assert hint in str(e.value), (name, str(e.value))


def test_the_largest_lever_passes():
    assert lab11.check_largest_lever("loader", STARVED)
    assert lab11.largest_lever(STARVED) == ("data_wait", ["loader"])
    # two rungs act on compute: either is the answer
    assert lab11.check_largest_lever("compile", COMPUTE) and lab11.check_largest_lever("bf16", COMPUTE)


@pytest.mark.parametrize("answer, hint", [
    ("data_wait", "not a lever"),          # the part, not the rung
    ("compile", "which part holds the most time"),   # the rung listed first, not the one on the largest part
    ("adamw", "which part holds the most time"),
    ("numa", "does not recommend"),        # a rung that does not apply here
    ("faster", "not a rung"),
    (3, "as a string"),
])
def test_mutants_are_rejected_with_a_hint(answer, hint):
    with pytest.raises(LabCheckError, match=hint):
        lab11.check_largest_lever(answer, STARVED)


def test_a_stub_is_not_done_yet(capsys):
    assert lab11.check_largest_lever(None, STARVED) is False
    assert "not done yet" in capsys.readouterr().out


def test_a_ladder_left_short_by_inconclusive_rungs_says_so(capsys):
    grading.reset()
    res = LadderResult("smoke", "cpu", [_row("baseline", 1.0, "reference"), _row("loader", 1.4, "inconclusive")],
                       None, "/dev/null")
    with pytest.raises(LabCheckError, match="loader stayed inconclusive .* fresh=True"):
        lab.check_result(["loader"], res, target=1.1, budget=None)
    grading.reset()
    busy = {**_row("loader", 1.4, "inconclusive"), "busy": True}
    res = LadderResult("smoke", "cpu", [_row("baseline", 1.0, "reference"), busy], None, "/dev/null")
    # no verdict from a busy machine, either way: the check is inconclusive, not wrong, and a summary that
    # requires every check lets it through
    assert lab.check_result(["loader"], res, target=1.1, budget=None) is False
    assert dict(grading.summary(require_all=True)) == {"beat the baseline": "inconclusive"}
    assert "? beat the baseline: inconclusive: your ladder ends" in capsys.readouterr().out
    grading.reset()
