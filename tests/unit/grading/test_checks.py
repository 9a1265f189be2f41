"""Tests of `perflab.grading.checks`."""

from __future__ import annotations

import functools
import json
import random

import pytest

from perflab.grading import checks as grading
from perflab.grading.checks import LabCheckError, MultipleChoice, Summary, Verdict, grade
from tests.unit.core.helpers import _Printer

CASES = [({"a": a, "b": b}, 2 * a * b + a) for a, b in ((3, 5), (8, 8), (7, 1))]


def _ref(a, b):
    return 2 * a * b + a


NB = {
    "cells": [
        {"id": "p", "cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "smoke = True", "outputs": [],
         "execution_count": None},
        {"id": "a", "cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source":
            "from perflab.grading import checks as grading\ngrading.reset()\n"
            "grading.grade('stub', lambda x: (_ for _ in ()).throw(NotImplementedError()), [({'x': 1}, 2)])"},
        {"id": "b", "cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source":
            "grading.grade('double', lambda x: x + 1, [({'x': 3}, 6)], hint='twice x')"},
        {"id": "c", "cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": "print('after')"},
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def test_grading_finds_the_code_under_wrappers():
    def original(x):
        return x

    @functools.wraps(original)
    def wrapper(x):
        return original(x)

    assert grading._code(wrapper) is original.__code__
    assert grading._code(functools.lru_cache(original)) is original.__code__
    assert grading._code(len) is None  # a builtin has no Python code


def test_multiple_choice_prints_as_text_in_ipython():
    quiz = grading.MultipleChoice("q", ["why?"], ["this", "that"], correct=[1], user="bob")
    p = _Printer()
    quiz._repr_pretty_(p, False)
    assert p.out == str(quiz) and p.out.startswith("q\nquestions:\n  1. why?\noptions:\n")


def test_verdict_compares_hashes_and_prints():
    assert Verdict(True) == Verdict(True) and Verdict(False) == False  # noqa: E712 - a check's result against a bool
    assert Verdict(True).__eq__("yes") is NotImplemented
    assert len({Verdict(True), Verdict(True), Verdict(False)}) == 2
    assert repr(Verdict(True)) == "Verdict(passed)" and repr(Verdict(False)) == "Verdict(not done)"


def test_an_empty_summary_says_so():
    assert str(Summary()) == "no checks ran yet" and Summary()._repr_html_() == "<p>no checks ran yet</p>"


def test_multiple_choice_refuses_a_broken_key_and_reads_a_string_of_letters(capsys):
    with pytest.raises(ValueError, match="one correct option per question"):
        MultipleChoice("q", ["a?", "b?"], ["x", "y", "z"], correct=[0])
    with pytest.raises(ValueError, match="outside the options"):
        MultipleChoice("q", ["a?"], ["x", "y"], correct=[2])
    quiz = MultipleChoice("fixes", ["slow input?", "too many syncs?"], ["more workers", "drop .item()", "bigger batch"],
                          correct=[0, 1], user="alice")
    assert quiz.check(", ".join(quiz.answer_key()))
    with pytest.raises(LabCheckError, match="2 answers needed, one letter per question, got 1"):
        quiz.check("a")
    text = str(quiz)
    assert text.startswith("fixes\nquestions:\n  1. slow input?") and "options:" in text
    assert all(f"  {ltr}) " in text for ltr in "abc")


def test_grading_learner_falls_back_without_a_user_name(monkeypatch):
    import getpass

    def no_user():
        raise KeyError("uid not found")

    monkeypatch.setattr(getpass, "getuser", no_user)
    assert grading.learner() == "learner"


def test_diagnose_copes_with_a_learner_function_and_mistake_models_that_raise():
    def student(n, flag):
        if n > 100:
            raise ValueError("too big for my formula")
        return 2 * n

    def bad_model(n, flag):
        raise ZeroDivisionError

    cases = [({"n": 4, "flag": True}, 12), ({"n": 200, "flag": True}, 600)]
    hint = grading.diagnose(student, cases, ({"n": 4, "flag": True}, 12, 8), rtol=1e-9, atol=0,
                            mistakes=[("never", bad_model)], reference=lambda n, flag: 3 * n if flag else n)
    # the case the learner's function fails on is left out, the mistake model that raises is skipped
    assert hint == ("your answer does not change when `flag` changes, but the right one does: the formula "
                    "ignores an input")


def test_perturbed_inputs_of_each_kind_and_an_ignored_flag():
    assert grading._perturbed(True) == [False] and grading._perturbed("text") == []

    def student(n, flag):
        return 3 * n  # ignores the flag

    key = grading._ignored_input(student, lambda n, flag: 3 * n if flag else n, {"n": 4, "flag": True}, 1e-9, 0)
    assert key == "flag"

    def picky(n, flag):
        if n != 4:
            raise ValueError("only 4")
        return 12

    assert grading._ignored_input(picky, lambda n, flag: 3 * n, {"n": 4, "flag": True}, 1e-9, 0) is None


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


def _hidden_ref(a: int, b: int) -> int:
    return a * b + 1


def test_a_right_answer_passes_on_the_grading_inputs():
    grading.reset()
    inputs = [{"a": grading.draw_int(random.Random(k), 1, 10**6), "b": k} for k in range(5)]
    assert grading.hidden("mul", lambda a, b: a * b + 1, _hidden_ref, inputs)
    assert grading.summary() == {"mul": "passed"}


def test_a_lookup_table_fails_on_inputs_it_has_not_seen():
    grading.reset()
    table = {(2, 3): 7}
    with pytest.raises(grading.LabCheckError, match="wrong on the grading inputs"):
        grading.hidden("mul", lambda a, b: table.get((a, b), 0), _hidden_ref, [{"a": 2, "b": 3}, {"a": 5, "b": 7}])
    assert grading.summary() == {"mul": "wrong"}


def test_a_stub_is_not_done_and_one_of_several_references_is_enough():
    grading.reset()

    def stub(a, b):
        raise NotImplementedError

    assert not grading.hidden("mul", stub, _hidden_ref, [{"a": 1, "b": 1}])
    assert grading.summary() == {"mul": "not done"}
    assert grading.hidden("either", lambda a, b: a * b, [_hidden_ref, lambda a, b: a * b], [{"a": 4, "b": 5}])


def test_drawn_sizes_stay_in_range_and_spread_over_decades():
    rng = random.Random(0)
    xs = [grading.draw_int(rng, 1, 10**6) for _ in range(400)]
    assert min(xs) >= 1 and max(xs) <= 10**6
    assert sum(x < 1000 for x in xs) > 100 and sum(x > 1000 for x in xs) > 100
    assert grading.draw_int(rng, 5, 5) == 5


def test_the_learner_is_the_graders_name_for_them(monkeypatch):
    monkeypatch.setenv("PERFLAB_LEARNER", "ada")
    assert grading.learner() == "ada"
    quiz = grading.MultipleChoice("q", ["one?", "two?"], ["x", "y", "z"], correct=[0, 1])
    assert quiz.answer_key() == grading.MultipleChoice("q", ["one?", "two?"], ["x", "y", "z"], [0, 1],
                                                       user="ada").answer_key()


def test_an_inconclusive_check_is_neither_passed_nor_wrong_and_a_full_summary_lets_it_through(capsys):
    from perflab.grading import checks as g

    g.reset()
    g.record("measured", True)
    assert g.inconclusive("timed", "the machine was busy") is False
    assert "? timed: inconclusive: the machine was busy" in capsys.readouterr().out
    assert dict(g.summary(require_all=True)) == {"measured": "passed", "timed": "inconclusive"}
    g.record("other", False)
    with pytest.raises(g.LabCheckError, match="not every check passed: other"):
        g.summary(require_all=True)
    g.reset()
