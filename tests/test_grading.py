import json
import sys

import pytest

from perflab.core import grading
from perflab.core.grading import LabCheckError, MultipleChoice, grade
from perflab.flops import lab01


def setup_function():
    grading.reset()


def test_stub_is_not_done_and_prints_one_line(capsys):
    def stub(x):
        raise NotImplementedError

    v = grade("g", stub, [({"x": 1}, 2)])
    assert not v and v == False  # noqa: E712  # a Verdict compares equal to the bool it stands for
    assert capsys.readouterr().out.strip() == "… g: not done yet — fill in the function and run this cell again."
    assert v._ipython_display_() is None  # a notebook shows nothing more than the line (no bare False)
    with pytest.raises(LabCheckError, match="not every check passed"):
        grading.summary(require_all=True)


def test_wrong_answer_raises_with_expectation():
    with pytest.raises(LabCheckError, match="expected 2"):
        grade("g", lambda x: 3, [({"x": 1}, 2)])
    with pytest.raises(LabCheckError, match="return"):
        grade("g", lambda x: None, [({"x": 1}, 2)])
    assert grading.summary() == {"g": "wrong"}


def test_right_answer_passes():
    assert grade("g", lambda x: 2 * x, [({"x": 1}, 2), ({"x": 5}, 10)])
    s = grading.summary(require_all=True)
    assert s == {"g": "passed"}
    assert "<table" in s._repr_html_() and "1 of 1 checks passed" in s._repr_html_() and "g" in str(s)


def test_tolerance():
    assert grade("g", lambda x: 1.0001, [({"x": 1}, 1.0)], rtol=1e-3)
    with pytest.raises(LabCheckError):
        grade("g2", lambda x: 1.01, [({"x": 1}, 1.0)], rtol=1e-3)


def test_require_all_with_no_checks():
    with pytest.raises(LabCheckError):
        grading.summary(require_all=True)


CASES = [({"a": a, "b": b}, 2 * a * b + a) for a, b in ((3, 5), (8, 8), (7, 1))]


def _ref(a, b):
    return 2 * a * b + a


def test_hint_names_a_known_mistake():
    with pytest.raises(LabCheckError, match="forgot the a term"):
        grade("g", lambda a, b: 2 * a * b, CASES, mistakes=[("you forgot the a term", lambda a, b: 2 * a * b)])


def test_hint_says_which_input_is_ignored():
    with pytest.raises(LabCheckError, match="`b` changes.*ignores an input"):
        grade("g", lambda a, b: 4 * a, CASES, reference=_ref)


def test_hint_says_constant_factor():
    with pytest.raises(LabCheckError, match="2× the right one"):
        grade("g", lambda a, b: 2 * _ref(a, b), CASES, reference=_ref)


def test_hint_says_only_some_cases_fit():
    special = lambda a, b: 23 if (a, b) == (7, 1) else _ref(a, b) + 1 if a == 8 else _ref(a, b)  # noqa: E731
    with pytest.raises(LabCheckError, match="right on 1 of 3 cases"):
        grade("g", special, CASES)


def test_calling_the_perflab_function_is_refused_however_imported():
    from perflab.core import readout
    from perflab.core.readout import num as alias

    with pytest.raises(LabCheckError, match="calls perflab's perflab.core.readout.num"):
        grade("g", lambda x: len(alias(x)), [({"x": 1.5}, 3)], forbidden=[readout.num])
    assert grade("g", lambda x: len(f"{x}"), [({"x": 1.5}, 3)], forbidden=[readout.num])
    assert sys.getprofile() is None  # the watch leaves no profiler behind


def test_multiple_choice_is_shuffled_per_learner_and_never_in_order():
    qs, opts = ["q1", "q2", "q3", "q4"], ["o1", "o2", "o3", "o4"]
    keys = set()
    for user in ("ada", "bob", "cy", "dee", "eve", "fay"):
        quiz = MultipleChoice("fixes", qs, opts, correct=[0, 1, 2, 3], user=user)
        key = quiz.answer_key()
        assert key == MultipleChoice("fixes", qs, opts, correct=[0, 1, 2, 3], user=user).answer_key()  # stable
        assert all(k != ltr for k, ltr in zip(key, "abcd", strict=True))  # a, b, c, d in order: all wrong
        keys.add(tuple(key))
        assert quiz.check(key)
        with pytest.raises(LabCheckError, match="not right yet"):
            quiz.check(["a", "b", "c", "d"])
        with pytest.raises(LabCheckError, match="not one of the letters"):
            quiz.check(["z", "b", "c", "d"])
    assert len(keys) > 1  # learners see different orders
    quiz = MultipleChoice("one", ["which?"], ["x", "y", "z"], correct=[2])
    assert not quiz.check(None)
    assert "<table" in quiz._repr_html_()


NB = {
    "cells": [
        {"id": "p", "cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "smoke = True", "outputs": [],
         "execution_count": None},
        {"id": "a", "cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source":
            "from perflab.core import grading\ngrading.reset()\n"
            "grading.grade('stub', lambda x: (_ for _ in ()).throw(NotImplementedError()), [({'x': 1}, 2)])"},
        {"id": "b", "cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source":
            "grading.grade('double', lambda x: x + 1, [({'x': 3}, 6)], hint='twice x')"},
        {"id": "c", "cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": "print('after')"},
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def test_in_a_kernel_a_wrong_answer_is_one_short_error_and_the_run_stops(tmp_path):
    import papermill as pm

    src, out = tmp_path / "g.ipynb", tmp_path / "o.ipynb"
    src.write_text(json.dumps(NB))
    with pytest.raises(pm.PapermillExecutionError) as err:
        pm.execute_notebook(str(src), str(out), progress_bar=False, kernel_name="python3", cwd=str(tmp_path))
    assert err.value.ename == "LabCheckError"
    cells = json.loads(out.read_text())["cells"]
    stub_outputs = [o for c in cells if "stub" in "".join(c["source"]) for o in c["outputs"]]
    assert [o["output_type"] for o in stub_outputs] == ["stream"]  # the not-done line, no `False`
    assert "not done yet" in "".join(stub_outputs[0]["text"])
    wrong = next(c for c in cells if "double" in "".join(c["source"]))
    errors = [o for o in wrong["outputs"] if o["output_type"] == "error"]
    assert len(errors) == 1 and len(errors[0]["traceback"]) == 1  # one line, no frames
    assert "expected 6" in errors[0]["traceback"][0] and "twice x" in errors[0]["traceback"][0]
    assert "grading.py" not in json.dumps(wrong["outputs"])
    after = next(c for c in cells if "after" in "".join(c["source"]))
    assert after["outputs"] == []  # the notebook stopped at the wrong answer


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
