"""Lab 01: its checks accept the reference answer and reject each plausible mistake with a hint."""

from __future__ import annotations

import pytest

from perflab.flops import lab01
from perflab.flops import lab01 as lab
from perflab.grading import checks as grading
from perflab.grading.checks import LabCheckError


# the reference solution, as written out in the solution notebook
def forward(batch, d_in, d_hidden, d_out):
    return 2 * batch * d_in * d_hidden + 2 * batch * d_hidden * d_out


def train(batch, d_in, d_hidden, d_out):
    f = forward(batch, d_in, d_hidden, d_out)
    return f + f + 2 * batch * d_hidden * d_out


def tflops(m, n, k, seconds):
    return 2 * m * n * k / seconds / 1e12


# mutants: (check, function, a keyword the hint must contain)
def macs_not_flops(batch, d_in, d_hidden, d_out):  # wrong convention
    return batch * d_in * d_hidden + batch * d_hidden * d_out


def counts_bias(batch, d_in, d_hidden, d_out):  # an extra term
    return forward(batch, d_in, d_hidden, d_out) + batch * (d_hidden + d_out)


def ignores_d_out(batch, d_in, d_hidden, d_out):  # ignores an input
    return 2 * batch * d_in * d_hidden + 2 * batch * d_hidden * d_hidden


def two_k_minus_one(batch, d_in, d_hidden, d_out):  # off by one: k − 1 additions per dot product
    return batch * d_hidden * (2 * d_in - 1) + batch * d_out * (2 * d_hidden - 1)


def visible_example_only(batch, d_in, d_hidden, d_out):  # special-cased to the lab's example
    return 2 * batch * d_hidden * (d_in + d_out) if (d_in, d_out) == (32, 10) else 2 * batch * d_in * d_hidden


def three_x_rule(batch, d_in, d_hidden, d_out):  # the naive formula the lesson warns about
    return 3 * forward(batch, d_in, d_hidden, d_out)


def forgets_input_gradient(batch, d_in, d_hidden, d_out):  # a missing term
    return 2 * forward(batch, d_in, d_hidden, d_out)


def gflops(m, n, k, seconds):  # wrong unit
    return 2 * m * n * k / seconds / 1e9


def times_seconds(m, n, k, seconds):  # upside down
    return 2 * m * n * k * seconds / 1e12


def calls_perflab(batch, d_in, d_hidden, d_out):  # the answer computed by perflab
    return lab.counted_forward(batch, d_in, d_hidden, d_out)


MUTANTS = [
    (lab.check_forward, macs_not_flops, "MAC"),
    (lab.check_forward, counts_bias, "bias"),
    (lab.check_forward, ignores_d_out, "ignores an input"),
    (lab.check_forward, two_k_minus_one, "2k − 1"),
    (lab.check_forward, visible_example_only, "fits only some"),
    (lab.check_forward, calls_perflab, "calls perflab"),
    (lab.check_train_step, three_x_rule, "3× rule"),
    (lab.check_train_step, forgets_input_gradient, "hidden activation"),
    (lab.check_tflops, gflops, "GFLOP/s"),
    (lab.check_tflops, times_seconds, "divided by seconds"),
]


def test_lab01_reference_tflops():
    assert lab01.reference_tflops(1000, 2000, 500, 0.5) == 2 * 1000 * 2000 * 500 / 0.5 / 1e12 == 0.004


def test_lab01_forward():
    assert lab01.check_forward(lambda batch, d_in, d_hidden, d_out: 2 * batch * d_hidden * (d_in + d_out))
    with pytest.raises(LabCheckError):  # MACs instead of FLOPs
        lab01.check_forward(lambda batch, d_in, d_hidden, d_out: batch * d_hidden * (d_in + d_out))


def test_lab01_train_step():
    ok = lambda batch, d_in, d_hidden, d_out: 2 * batch * d_hidden * (d_in + d_out) * 2 + 2 * batch * d_hidden * d_out  # noqa: E731
    assert lab01.check_train_step(ok)
    three_x = lambda batch, d_in, d_hidden, d_out: 3 * 2 * batch * d_hidden * (d_in + d_out)  # noqa: E731
    with pytest.raises(LabCheckError, match="data needs no gradient"):  # the common 3× rule ignores the first layer's skip
        lab01.check_train_step(three_x)


def test_lab01_tflops():
    assert lab01.check_tflops(lambda m, n, k, seconds: 2 * m * n * k / seconds / 1e12)
    with pytest.raises(LabCheckError):
        lab01.check_tflops(lambda m, n, k, seconds: m * n * k / seconds / 1e12)


@pytest.mark.parametrize(("check", "mutant", "keyword"), MUTANTS, ids=[m.__name__ for _c, m, _k in MUTANTS])
def test_mutant_is_rejected_with_a_hint_naming_the_mistake(check, mutant, keyword):
    with pytest.raises(LabCheckError, match="Hint") as err:
        check(mutant)
    assert keyword in str(err.value), str(err.value)


def test_reference_solution_passes():
    assert lab.check_forward(forward) and lab.check_train_step(train) and lab.check_tflops(tflops)
    assert grading.summary(require_all=True) == {"MLP forward FLOPs": "passed", "MLP forward+backward FLOPs": "passed",
                                                 "matmul TFLOP/s": "passed"}


def test_the_written_references_agree_with_torchs_counter():
    for shape in lab.CASES:
        assert lab.reference_forward(*shape) == lab.counted_forward(*shape)
        assert lab.reference_train_step(*shape) == lab.counted_train_step(*shape)
