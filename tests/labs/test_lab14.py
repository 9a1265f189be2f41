"""Lab 14's checks: the stub is not done, the reference passes, plausible wrong answers are rejected with a hint."""


import pytest

from perflab.grading import checks as grading
from perflab.grading.checks import LabCheckError
from perflab.hunt import lab14
from tests.unit.hunt import hunter  # the scripted hunters, shared with the hunt's unit tests


def test_the_stub_is_not_done(capsys):
    grading.reset()

    def stub(ev):
        raise NotImplementedError

    assert not lab14.check_read_evidence(stub)
    assert "not done yet" in capsys.readouterr().out


def test_the_careful_reading_passes():
    grading.reset()
    assert lab14.check_read_evidence(hunter.careful)


@pytest.mark.parametrize("mutant, words", [
    (hunter.claim_everything, "not planted"),
    (lambda ev: hunter.careful(ev)[1:], "did not claim"),
    (lambda ev: [c for c in hunter.careful(ev) if c[0] != "persistent_workers"], "worker"),
    (lambda ev: [], "did not claim"),
])
def test_plausible_wrong_readings_are_rejected_with_a_hint(mutant, words):
    grading.reset()
    with pytest.raises(LabCheckError, match=words):
        lab14.check_read_evidence(mutant)
    assert grading.summary() == {"read_evidence": "wrong"}  # a ✗ is never listed as "not done"


def test_a_malformed_claim_is_one_clear_line():
    grading.reset()
    with pytest.raises(LabCheckError, match="write each claim"):
        lab14.check_read_evidence(lambda ev: ["gc"])


def _hunt():
    from perflab.hunt.draw import draw_for, reveal_draw
    from perflab.hunt.report import load_signatures, synthetic_evidence

    d = draw_for("ada", 3)
    return lab14.Hunt.of(d, {n: 0.5 for n in reveal_draw(d)}, "smoke", synthetic_evidence(reveal_draw(d), load_signatures()))


def test_the_report_stub_is_not_done(capsys):
    grading.reset()

    def stub(ev):
        raise NotImplementedError

    assert not lab14.check_report(stub, _hunt())
    assert "not done yet" in capsys.readouterr().out


def test_a_report_with_an_unknown_fix_is_one_line_before_any_run():
    grading.reset()
    with pytest.raises(LabCheckError, match="unknown fix"):
        lab14.check_report(lambda ev: [("gc_full_collections", "a collection every step", "reboot")], _hunt())


def test_the_draw_line_names_no_regression():
    from perflab.hunt.pool import NAMES

    line = lab14.describe(_hunt())
    assert not any(n in line for n in NAMES)


def test_the_hunt_keeps_its_costs_without_names():
    from perflab.hunt.pool import NAMES

    h = _hunt()
    assert not any(n in k for k in h.shares for n in NAMES)
    assert set(h.costs()) == set(__import__("perflab.hunt.draw", fromlist=["x"]).reveal_draw(h.draw))


def test_the_op_calls_table_shows_the_step_and_what_differs_from_the_clean_one():
    from perflab.hunt.report import load_signatures

    sig = load_signatures()
    plain = lab14.op_calls_table(sig["clip_loop"], n=5)
    assert len(plain) == 5 and list(plain.columns) == ["op", "calls"]
    both = lab14.op_calls_table(sig["clip_loop"], sig["clean"], n=5)
    rows = {r["op"]: (r["calls"], r["clean step"]) for r in both.to_dict("records")}
    assert rows["aten::_foreach_norm"] == (0, 1)  # what tells per-tensor clipping from the clean step on a CPU
    assert rows["aten::item"][0] > rows["aten::item"][1]
