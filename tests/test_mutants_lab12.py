"""Lab 12: the right answers pass, every plausible wrong one is rejected with the hint for its mistake."""

import re

import pytest

from perflab.core import grading
from perflab.core.grading import LabCheckError
from perflab.shard import lab12


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


def test_a_stub_is_not_done_yet():
    grading.reset()

    def stub(p, m):
        raise NotImplementedError

    assert lab12.check_bubble(stub) is False
    assert grading.summary()["pipeline bubble"] == "not done"
