"""Lab 09: its checks accept the reference answer and reject each plausible mistake with a hint."""

from __future__ import annotations

import json

import pytest

from perflab.grading import checks as grading
from perflab.grading.checks import LabCheckError
from perflab.profiling import diagnose, lab09, trace
from perflab.profiling import lab09 as lab
from perflab.profiling.diagnose import tiny_runs
from perflab.profiling.trace import gaps


def rule(slack=50e-6, min_run=8, threshold=0.10, launch=True, share_of="steps"):
    def name_cause(trace):
        ops_, waits = trace.device_ops(), trace.waits()
        score = {"data_wait": 0.0, "host_sync": 0.0, "communication": 0.0, "launch_bound": 0.0}
        for step in trace.steps:
            for g0, g1, _ in gaps(ops_, step.start, step.end):
                near = [w for w in waits if w.end >= g0 - slack and w.start <= g1]
                if near:
                    w = max(near, key=lambda w: min(w.end, g1) - max(w.start, g0 - slack))
                    score[w.kind] += g1 - g0
        if launch:
            run, i = tiny_runs(ops_, 20e-6), 0
            while i < len(ops_):
                if run[i] >= min_run:
                    score["launch_bound"] += ops_[i + run[i] - 1].end - ops_[i].start
                    i += run[i]
                else:
                    i += 1
        cause, seconds = max(score.items(), key=lambda kv: kv[1])
        total = sum(s.dur for s in trace.steps) if share_of == "steps" else len(trace.steps)
        return cause if seconds / total >= threshold else "none"
    return name_cause


reference = rule()


no_allowance = rule(slack=0.0)                 # drops the 50 µs allowance


allowance_too_small = rule(slack=20e-6)        # off by a factor: 20 µs where the lesson says 50


no_launch_rule = rule(launch=False)            # a missing term: never counts launch-bound runs


no_threshold = rule(threshold=0.0)             # reports a cause however small it is


share_per_step_count = rule(share_of="count")  # wrong convention: seconds ÷ number of steps


def longest_wait(trace):  # the naive reading: the longest host wait, not the device's idle time
    waits = trace.waits()
    if not waits:
        return "none"
    return max(waits, key=lambda w: w.dur).kind


def always_host_sync(trace):  # ignores its input
    return "host_sync"


def calls_diagnose(trace):

    top = diagnose.diagnose(trace).top
    return top.cause if top and top.share >= 0.1 else "none"


def _solution(trace):
    ops, waits = trace.device_ops(), trace.waits()
    score = dict.fromkeys(("data_wait", "host_sync", "communication", "launch_bound"), 0.0)
    for step in trace.steps:
        for g0, g1, _ in gaps(ops, step.start, step.end):
            near = [w for w in waits if w.end >= g0 - 50e-6 and w.start <= g1]
            if near:
                w = max(near, key=lambda w: min(w.end, g1) - max(w.start, g0 - 50e-6))
                score[w.kind] += g1 - g0
    run, i = tiny_runs(ops, 20e-6), 0
    while i < len(ops):
        if run[i] >= 8:
            score["launch_bound"] += ops[i + run[i] - 1].end - ops[i].start
            i += run[i]
        else:
            i += 1
    cause, s = max(score.items(), key=lambda kv: kv[1])
    return cause if s / sum(st.dur for st in trace.steps) >= 0.10 else "none"


def test_lab09_skips_live_traces_perflab_itself_misreads(tmp_path, capsys):
    from perflab.grading import checks as grading

    grading.reset()
    (tmp_path / "trace_A.json").write_text(json.dumps(trace.synthetic_step("data_wait")))
    (tmp_path / "trace_B.json").write_text(json.dumps(trace.synthetic_step(None)))  # a sync fault drowned out
    (tmp_path / ".key.json").write_text(json.dumps({"A": "loader", "B": "sync"}))
    assert lab09.check_name_cause(_solution, tmp_path)
    assert capsys.readouterr().out.strip() == "✓ name_cause: correct on 12 traces (1 live trace(s) too noisy to grade: B)"


def test_lab09_fix_quiz_refuses_unknown_causes_and_letters():
    from perflab.grading.checks import LabCheckError
    from perflab.profiling import lab09

    right = lab09.right_fix("alice")
    with pytest.raises(LabCheckError, match="unknown cause\\(s\\) \\['gremlins'\\]"):
        lab09.check_fixes({**dict.fromkeys(right, "?"), "gremlins": "a"}, learner="alice")
    with pytest.raises(LabCheckError, match="'zz' for .* is not one of"):
        lab09.check_fixes({**right, next(iter(right)): "zz"}, learner="alice")


def test_reference_passes():
    assert lab.check_name_cause(reference)


@pytest.mark.parametrize("mutant, kind", [
    (no_allowance, "missing allowance"), (allowance_too_small, "missing allowance"),
    (no_launch_rule, "launch overhead"), (no_threshold, "at least 10%"), (share_per_step_count, "at least 10%"),
    (longest_wait, "Hint:"), (always_host_sync, "Hint:"), (calls_diagnose, "perflab's own diagnose"),
])
def test_mutants_are_refused_by_kind(mutant, kind):
    with pytest.raises(LabCheckError, match="name_cause") as e:
        lab.check_name_cause(mutant)
    assert kind in str(e.value)


def test_fix_quiz_is_shuffled_per_learner_and_never_in_order():
    orders = set()
    for who in ("ada", "grace", "alan", "edsger", "barbara", ""):
        right = lab.right_fix(who)
        assert list(right.values()) != ["a", "b", "c", "d"]
        assert all(right[c] != "abcd"[i] for i, c in enumerate(lab.CAUSE_ORDER))
        orders.add(tuple(right.values()))
        grading.reset()
        assert lab.check_fixes(dict(right), learner=who)
        with pytest.raises(LabCheckError):
            lab.check_fixes(dict(zip(lab.CAUSE_ORDER, "abcd")), learner=who)
    assert len(orders) > 1  # not one fixed order for everybody
    assert lab.fix_choices("ada")[lab.right_fix("ada")["data_wait"]].startswith("give the DataLoader workers")


def test_lab09_checks():
    grading.reset()

    def stub(trace):
        raise NotImplementedError

    assert not lab09.check_name_cause(stub)
    assert lab09.check_name_cause(_solution)
    with pytest.raises(LabCheckError):
        lab09.check_name_cause(lambda t: "data_wait")
    with pytest.raises(LabCheckError, match="one of"):
        lab09.check_name_cause(lambda t: "gremlins")
    right = lab09.right_fix()
    assert not lab09.check_fixes({c: "?" for c in right})
    assert lab09.check_fixes(dict(right))
    with pytest.raises(LabCheckError):
        lab09.check_fixes({**right, "data_wait": next(k for k in "abcde" if k not in right.values())})
