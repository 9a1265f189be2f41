"""Lab 12: its checks accept the reference answer in either of the bubble's conventions and reject each
plausible mistake with a hint; FSDP's bytes graded live."""

from __future__ import annotations

import re

import pytest

from perflab.grading import checks as grading
from perflab.grading.checks import LabCheckError
from perflab.shard import formulas as F
from perflab.shard import lab12
from perflab.shard.formulas import Replay
from perflab.shard.report import PipelineRun


def right_bubble(p, m):
    return (p - 1) / (m + p - 1)


def right_fsdp(params, nproc):
    return 16 * params / nproc


BUBBLE_MUTANTS = [
    (lambda p, m: (p - 1) / m, "say denominator='ideal'"),
    (lambda p, m: (p - 1) / (m + p), "m + p − 1 slots"),
    (lambda p, m: p / (m + p - 1), "p − 1, not p"),
    (lambda p, m: (m - 1) / (m + p - 1), "depend on the stages"),
    (lambda p, m: 1 / m, "grows with the number of stages"),
    (lambda p, m: (p - 1) // (m + p - 1), "integer division"),
    (lambda p, m: m / (m + p - 1), "busy fraction"),
    (lambda p, m: (p - 1) / (m + p - 1) / 2, "count the empty ones"),
]


FSDP_MUTANTS = [
    (lambda params, nproc: 16 * params, "divide by nproc"),
    (lambda params, nproc: 4 * params / nproc, "the weights are not all"),
    (lambda params, nproc: 12 * params / nproc, "forgets the gradients"),
    (lambda params, nproc: 8 * params / nproc, "two fp32 moments"),
    (lambda params, nproc: 18 * params / nproc, "mixed precision"),
    (lambda params, nproc: 16 * params / max(nproc - 1, 1), "itself included"),
    (lambda params, nproc: 4 * params + 12 * params / nproc, "ZeRO-2"),
    (lambda params, nproc: 2 * params / nproc, "what ZeRO-3 divides"),
]


def megatron(p, m):
    return (p - 1) / m


def whole_step(p, m):
    return (p - 1) / (m + p - 1)


RATIO_MUTANTS = [
    (lambda p, m: p / m, "p − 1, not p"),
    (lambda p, m: (p - 1) / (m + 1), "the m slots a stage works"),
    (lambda p, m: m / (p - 1) if p > 1 else 0.0, "upside down"),
    (lambda p, m: 1 / m, "grows with the number of stages"),
    (lambda p, m: (p - 1) // m, "integer division"),
    (lambda p, m: (p - 1) / (2 * m), "not 2m"),
    (lambda p, m: (p - 1) / m / 3, "your denominator (ideal)"),
]


def test_lab12_grader_refuses_a_non_number_and_skips_mistakes_that_raise():
    with pytest.raises(LabCheckError, match="you returned 'fast': return a number"):
        lab12._grade("bubble", lambda p, m: "fast", [({"p": 2, "m": 4}, 0.2)], {}, rtol=1e-6, atol=0,
                     general="(p-1)/(m+p-1)")

    def broken(p, m):
        raise ZeroDivisionError

    hint = lab12._diagnose(lambda p, m: 0.2, [({"p": 2, "m": 4}, 0.2)], {"raises": (broken, "never")}, rtol=1e-6)
    assert hint is None


@pytest.mark.parametrize("fn, hint", BUBBLE_MUTANTS)
def test_bubble_mutants_are_rejected_with_their_hint(fn, hint):
    with pytest.raises(LabCheckError, match=re.escape(hint)):
        lab12.check_bubble(fn)


@pytest.mark.parametrize("fn, hint", FSDP_MUTANTS)
def test_fsdp_mutants_are_rejected_with_their_hint(fn, hint):
    with pytest.raises(LabCheckError, match=re.escape(hint)):
        lab12.check_fsdp_bytes(fn)


def test_right_answers_pass_and_live_runs_are_graded():
    grading.reset()
    runs = [{"p": 2, "m": 4, "replayed_bubble": 0.21}, {"p": 2, "m": 8, "replayed_bubble": 0.12}]
    assert lab12.check_bubble(right_bubble, runs)
    rows = [{"nproc": 2, "param_bytes": 1088512, "grad_bytes": 1088512, "optim_bytes": 2177168}]
    assert lab12.check_fsdp_bytes(right_fsdp, rows, params=544256)
    assert grading.summary()["pipeline bubble vs the live runs"] == "passed"
    # a measurement far from the formula is reported, not hidden
    with pytest.raises(LabCheckError, match="within ±0.05"):
        lab12.check_bubble(right_bubble, [{"p": 2, "m": 4, "replayed_bubble": 0.4}])
    # the lab passes the live runs as ShardReport.details.runs: typed, graded the same
    typed = [PipelineRun(2, r["m"], 0.0, Replay(1.0, [], []), r["replayed_bubble"], 1.0, 0.0, [], []) for r in runs]
    assert lab12.check_bubble(right_bubble, typed)


def test_a_stub_is_not_done_yet():
    grading.reset()

    def stub(p, m):
        raise NotImplementedError

    assert lab12.check_bubble(stub) is False
    assert grading.summary()["pipeline bubble"] == "not done"


def test_both_conventions_pass_when_named_and_the_live_runs_are_compared_in_each():
    runs = [{"p": 2, "m": 4, "replayed_bubble": 0.21}, {"p": 2, "m": 8, "replayed_bubble": 0.12}]
    assert lab12.check_bubble(whole_step, runs, denominator="step")
    grading.reset()
    assert lab12.check_bubble(megatron, runs, denominator="ideal")
    assert grading.summary()["pipeline bubble vs the live runs"] == "passed"
    # the run measures idle over the step, f; Megatron's b = (p−1)/m is held to it as b/(1 + b)
    with pytest.raises(LabCheckError, match=r"0\.200 of the step.*measured 0\.400"):
        lab12.check_bubble(megatron, [{"p": 2, "m": 4, "replayed_bubble": 0.4}], denominator="ideal")


def test_each_convention_under_the_other_name_is_refused_with_a_pointer_to_it():
    with pytest.raises(LabCheckError, match="say denominator='ideal'"):
        lab12.check_bubble(megatron, denominator="step")
    with pytest.raises(LabCheckError, match="say denominator='step'"):
        lab12.check_bubble(whole_step, denominator="ideal")
    with pytest.raises(LabCheckError, match="say 'step'.*or 'ideal'"):
        lab12.check_bubble(megatron, denominator="busy")


@pytest.mark.parametrize("fn, hint", RATIO_MUTANTS)
def test_wrong_ratios_are_refused_with_their_hint(fn, hint):
    with pytest.raises(LabCheckError, match=re.escape(hint)):
        lab12.check_bubble(fn, denominator="ideal")


def test_the_two_conventions_are_one_quantity():
    for p, m in ((2, 1), (4, 8), (8, 32)):
        b, f = F.bubble_ratio(p, m), F.bubble_fraction(p, m)
        assert F.step_fraction_from_ratio(b) == pytest.approx(f)
        assert F.ratio_from_step_fraction(f) == pytest.approx(b)
