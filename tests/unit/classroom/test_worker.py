"""Tests of `perflab.classroom.worker`: the judge's side of the answer worker (what a worker's
answers are read back as, what it disarms, how it is started). The worker confined and attacked:
test_judge.py and test_sandbox.py."""

from __future__ import annotations

import sys

import pytest

from perflab.classroom import worker as W


def test_an_answer_too_large_for_the_grader_is_refused_before_it_is_built():
    with pytest.raises(W.AnswerError):
        W.decode({"__tensor__": "float32", "shape": [2**40], "data": [1.0]})
    with pytest.raises(W.AnswerError):
        W.decode({"__array__": "object", "shape": [1], "data": [1]})
    with pytest.raises(W.AnswerError):
        W.decode(list(range(W.MAX_ANSWER_ITEMS + 1)))


def test_answers_come_back_as_the_values_they_were():
    import numpy as np
    import torch

    assert W.decode({"__seq__": "tuple", "items": [1, {"__float__": "inf"}]}) == (1, float("inf"))
    assert W.decode({"__dict__": [[[1, 2], "a"]]}) == {(1, 2): "a"}
    t = W.decode({"__tensor__": "float32", "shape": [2, 1], "data": [1.0, 2.0]})
    assert t.dtype == torch.float32 and t.tolist() == [[1.0], [2.0]]
    a = W.decode({"__array__": "int64", "shape": [2], "data": [3, 4]})
    assert a.dtype == np.int64 and a.tolist() == [3, 4]
    with pytest.raises(W.AnswerError, match="shape and its values disagree"):
        W.decode({"__tensor__": "float32", "shape": [3], "data": [1.0]})
    with pytest.raises(W.AnswerError, match="cannot read"):
        W.decode({"__code__": "print(1)"})


def test_a_reply_is_read_from_its_json_and_anything_else_is_not_an_answer():
    assert W.Reply.from_json({"ok": True}).ok
    r = W.Reply.from_json({"error": "ValueError: no"})
    assert not r.ok and r.error == "ValueError: no" and not r.not_done
    assert W.Reply.from_json({"not_done": True}).not_done
    assert W.Reply.from_json({"value": [1, 2]}).value == [1, 2] and W.Reply.from_json({"value": 1}).error is None
    with pytest.raises(W.AnswerError, match="not an answer"):
        W.Reply.from_json([1, 2])


def test_the_worker_disarms_the_labs_answers_and_keeps_its_helpers():
    from perflab.dataloading import lab07

    forbidden = W.forbidden_of(lab07)
    assert ("perflab.dataloading.shuffle", "LCGPermutation") in forbidden  # the lab's FORBIDDEN
    assert {("perflab.dataloading.lab07", f) for f in ("_state", "check_index", "judge")} <= set(forbidden)
    assert not {("perflab.dataloading.lab07", h) for h in lab07.HELPERS} & set(forbidden)  # what the notebook calls
    assert all(m.startswith(W.ANSWER_PACKAGES) for m, _ in forbidden)


def test_a_trusted_python_reads_nothing_a_learner_could_plant():
    cmd = W.trusted_python("script.py")
    assert cmd[:4] == [sys.executable, "-I", "-S", "-B"] and cmd[-1] == "script.py"
    cached = W.trusted_python("script.py", pycache="/cache")
    assert cached[3:5] == ["-X", "pycache_prefix=/cache"]
    assert W.WORKER_SOURCE.name == "answer_worker.py" and W.WORKER_SOURCE.is_file()
