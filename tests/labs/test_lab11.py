"""Lab 11 on a machine too noisy to decide: the check says which rungs stayed inconclusive."""

import pytest

from perflab.core import grading
from perflab.core.grading import LabCheckError
from perflab.tune import lab11 as lab
from perflab.tune.runner import LadderResult


def _row(rung, speedup, verdict):
    return {"rung": rung, "step_s": 0.1 / speedup, "speedup_vs_baseline": speedup, "speedup_vs_previous": speedup,
            "adopted": verdict == "adopted", "verdict": verdict, "parity_ok": True, "peak_bytes": 2**20,
            "measured": True, "applicable": True, "loss_rel": 0.0, "tolerance": 1e-4, "loss": 6.0}


def test_a_ladder_left_short_by_inconclusive_rungs_says_so():
    grading.reset()
    res = LadderResult("smoke", "cpu", [_row("baseline", 1.0, "reference"), _row("loader", 1.4, "inconclusive")],
                       None, "/dev/null")
    with pytest.raises(LabCheckError, match="loader stayed inconclusive .* fresh=True"):
        lab.check_result(["loader"], res, target=1.1, budget=None)
    grading.reset()
