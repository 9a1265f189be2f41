"""Lab 11: the audit exercise (name an audit's largest lever; the wrong answers learners give are
rejected) and the check on a machine too noisy to decide (it says which rungs stayed inconclusive)."""
import pytest

from perflab.core import grading
from perflab.core.grading import LabCheckError
from perflab.tune import lab11
from perflab.tune import lab11 as lab
from perflab.tune.runner import LadderResult


def audit(**bd):
    parts = {"data_wait": 0.0, "host_sync": 0.0, "launch": 0.0, "optimizer": 0.0, "compute": 0.0, **bd}
    recs = [{"rung": r, "why": "", "measured_speedup": None, "parity_ok": None}
            for r in ("compile", "bf16", "loader", "adamw")]
    return {"step_s": sum(parts.values()), "breakdown_s": parts, "recommendations": recs}


STARVED = audit(data_wait=0.200, compute=0.050, launch=0.010, optimizer=0.005)
COMPUTE = audit(data_wait=0.020, compute=0.150, launch=0.010, optimizer=0.005)


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
