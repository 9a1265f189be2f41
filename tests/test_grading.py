import pytest

from perflab.core import grading
from perflab.core.grading import LabCheckError, grade
from perflab.flops import lab01


def setup_function():
    grading.reset()


def test_stub_is_not_done_and_does_not_raise(capsys):
    def stub(x):
        raise NotImplementedError

    assert grade("g", stub, [({"x": 1}, 2)]) is False
    assert "not done yet" in capsys.readouterr().out
    with pytest.raises(LabCheckError, match="not every check passed"):
        grading.summary(require_all=True)


def test_wrong_answer_raises_with_expectation():
    with pytest.raises(LabCheckError, match="expected 2"):
        grade("g", lambda x: 3, [({"x": 1}, 2)])
    with pytest.raises(LabCheckError, match="return"):
        grade("g", lambda x: None, [({"x": 1}, 2)])


def test_right_answer_passes():
    assert grade("g", lambda x: 2 * x, [({"x": 1}, 2), ({"x": 5}, 10)])
    assert grading.summary(require_all=True) == {"g": "passed"}


def test_tolerance():
    assert grade("g", lambda x: 1.0001, [({"x": 1}, 1.0)], rtol=1e-3)
    with pytest.raises(LabCheckError):
        grade("g2", lambda x: 1.01, [({"x": 1}, 1.0)], rtol=1e-3)


def test_require_all_with_no_checks():
    with pytest.raises(LabCheckError):
        grading.summary(require_all=True)


# lab 01: the checks grade against torch's counter, so a plausible-but-wrong convention fails

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
