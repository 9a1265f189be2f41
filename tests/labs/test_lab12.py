"""Lab 12's bubble in both of the field's conventions: idle over the whole step, (p−1)/(m+p−1), and
Megatron-LM's idle over the ideal time, (p−1)/m. Either passes when the learner names it; each is
refused, with the hint that names the other, when the learner names the wrong one; plausible wrong
answers in the "ideal" convention are refused with their own hints."""

import re

import pytest

from perflab.core import grading
from perflab.core.grading import LabCheckError
from perflab.shard import formulas as F
from perflab.shard import lab12


def megatron(p, m):
    return (p - 1) / m


def whole_step(p, m):
    return (p - 1) / (m + p - 1)


def setup_function():
    grading.reset()


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


RATIO_MUTANTS = [
    (lambda p, m: p / m, "p − 1, not p"),
    (lambda p, m: (p - 1) / (m + 1), "the m slots a stage works"),
    (lambda p, m: m / (p - 1) if p > 1 else 0.0, "upside down"),
    (lambda p, m: 1 / m, "grows with the number of stages"),
    (lambda p, m: (p - 1) // m, "integer division"),
    (lambda p, m: (p - 1) / (2 * m), "not 2m"),
    (lambda p, m: (p - 1) / m / 3, "your denominator (ideal)"),
]


@pytest.mark.parametrize("fn, hint", RATIO_MUTANTS)
def test_wrong_ratios_are_refused_with_their_hint(fn, hint):
    with pytest.raises(LabCheckError, match=re.escape(hint)):
        lab12.check_bubble(fn, denominator="ideal")


def test_the_two_conventions_are_one_quantity():
    for p, m in ((2, 1), (4, 8), (8, 32)):
        b, f = F.bubble_ratio(p, m), F.bubble_fraction(p, m)
        assert F.step_fraction_from_ratio(b) == pytest.approx(f)
        assert F.ratio_from_step_fraction(f) == pytest.approx(b)
