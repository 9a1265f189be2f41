"""Tests of `perflab.classroom.answers`: the learner's answers as a lab's judge sees them."""

from __future__ import annotations

import pytest

from perflab.classroom import answers as A


def _nb(*cells: str) -> dict:
    return {"cells": [{"cell_type": "code", "source": c, "metadata": {}, "outputs": []} for c in cells]}


def test_lab_11s_measuring_call_is_found_by_what_it_calls():
    nb = _nb("plan = ['adamw']", "_measure = runner.run_ladder", "def go(p):\n    return _measure(tp, p)",
             "result = go(plan)", "my_predictions = {'adamw': 1.1}")
    answers = A.Answers(None, [], {}, "", nb)  # type: ignore[arg-type]
    assert answers.first_cell_calling("run_ladder", using="plan") == 3
    nb["cells"][1]["source"] = "from perflab.tune.runner import run_ladder as _measure"
    assert answers.first_cell_calling("run_ladder", using="plan") == 3
    nb["cells"][1]["source"] = "_measure = getattr(runner, 'run_ladder')"
    assert answers.first_cell_calling("run_ladder", using="plan") == 3
    for opaque in ("getattr(runner, 'run_' + 'ladder')", "runner.__dict__['run_' + 'ladder']",
                   "eval('runner.run_' + 'ladder')", "operator.attrgetter('run_' + 'ladder')(runner)"):
        nb["cells"][1]["source"] = f"import operator\n_measure = {opaque}"
        assert answers.first_cell_calling("run_ladder", using="plan") == 3, opaque
    nb["cells"][1]["source"] = "_measure = print"  # a call that measures nothing
    assert answers.first_cell_calling("run_ladder", using="plan") is None


def test_a_name_the_notebook_does_not_define_is_not_done_and_asks_nothing_of_the_worker():
    nb = _nb("x = 2.5")
    answers = A.Answers(None, ["f", "x"], {}, "", nb)  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="f is not defined at the top level of the notebook"):
        answers["f"](1)
    assert answers.value("x", "default") == "default" and answers.probe("f", "m:fn") == {"not_done": True}
    assert answers.source("f") is None and list(answers) == ["f", "x"] and len(answers) == 2
    assert answers.literal("x")
    with pytest.raises(KeyError, match="no measurement 'nope'"):
        answers.measure("nope")
