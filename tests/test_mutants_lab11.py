"""Lab 11's checks reject plausible wrong answers, each with a hint, and pass a right one.

The results are built by hand (deterministic, no measurement): what the checks grade is the
ladder's rows, whatever machine measured them."""

import pytest

from perflab.core import grading
from perflab.core.grading import LabCheckError
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


@pytest.fixture(autouse=True)
def _fresh():
    grading.reset()
    yield
    grading.reset()


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


@pytest.mark.parametrize("name,plan,pred,res,hint", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_a_wrong_answer_is_rejected_with_a_hint(name, plan, pred, res, hint):
    with pytest.raises(LabCheckError) as e:
        lab.check_plan(plan, pred)
        lab.check_result(plan, res, target=1.3, budget=BUDGET, reference=REFERENCE)
    assert hint in str(e.value), (name, str(e.value))
