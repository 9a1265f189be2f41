"""`grading.hidden` and `grading.draw_int` (perflab/core/grading.py): the grader's own inputs."""

from __future__ import annotations

import random

import pytest

from perflab.core import grading


def _ref(a: int, b: int) -> int:
    return a * b + 1


def test_a_right_answer_passes_on_the_grading_inputs():
    grading.reset()
    inputs = [{"a": grading.draw_int(random.Random(k), 1, 10**6), "b": k} for k in range(5)]
    assert grading.hidden("mul", lambda a, b: a * b + 1, _ref, inputs)
    assert grading.summary() == {"mul": "passed"}


def test_a_lookup_table_fails_on_inputs_it_has_not_seen():
    grading.reset()
    table = {(2, 3): 7}
    with pytest.raises(grading.LabCheckError, match="wrong on the grading inputs"):
        grading.hidden("mul", lambda a, b: table.get((a, b), 0), _ref, [{"a": 2, "b": 3}, {"a": 5, "b": 7}])
    assert grading.summary() == {"mul": "wrong"}


def test_a_stub_is_not_done_and_one_of_several_references_is_enough():
    grading.reset()

    def stub(a, b):
        raise NotImplementedError

    assert not grading.hidden("mul", stub, _ref, [{"a": 1, "b": 1}])
    assert grading.summary() == {"mul": "not done"}
    assert grading.hidden("either", lambda a, b: a * b, [_ref, lambda a, b: a * b], [{"a": 4, "b": 5}])


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
