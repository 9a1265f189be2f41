"""Tests of `perflab.classroom.answer_source`: what a submitted notebook's source defines, read
without running it."""

from __future__ import annotations

import importlib
import json

import pytest

from perflab.classroom import answer_source as A

from .test_judge import LABS, forged


def test_answers_are_taken_by_name_with_what_they_need_and_nothing_else():
    nb = forged("07_shuffle", "import math\nK = 3\nexpensive = run_the_measurement()\n\n"
                              "def helper(x):\n    return x * K\n\n"
                              "def lcg_index(i, n, a, c, x0):\n    return helper(i) % n + math.floor(0.5)",
                "print('after')")
    code, _preload, where = A.extract(nb, ["lcg_index"])
    assert "def helper" in code and "K = 3" in code and "import math" in code
    assert "run_the_measurement" not in code and "print" not in code
    assert where["lcg_index"] == len(nb["cells"]) - 2


def test_every_lab_module_says_how_it_is_graded():
    for path in sorted(LABS.glob("*.ipynb")):
        name = A.lab_module_name(json.loads(path.read_text()))
        assert name is not None, path.name
        mod = importlib.import_module(name)
        assert getattr(mod, "LEARNER_ANSWERS", ()) and callable(getattr(mod, "judge", None)), name
        assert isinstance(getattr(mod, "REFERENCES", None), dict), name


def _nb(*cells: str) -> dict:
    return {"cells": [{"cell_type": "code", "source": c, "metadata": {}, "outputs": []} for c in cells]}


def test_a_notebook_is_read_within_its_bounds():
    with pytest.raises(ValueError, match="cells"):
        A.read_notebook(json.dumps({"cells": [{}] * (A.MAX_NOTEBOOK_CELLS + 1)}))
    with pytest.raises(ValueError, match=r"^not a notebook \(no list of cells\)$"):
        A.read_notebook(json.dumps({"cells": "oops"}))
    with pytest.raises(ValueError, match="MiB a lab may be"):
        A.read_notebook(b" " * (A.MAX_NOTEBOOK_BYTES + 1))
    assert A.read_notebook(json.dumps(_nb("x = 1")))["cells"][0]["source"] == "x = 1"


def test_a_value_written_out_is_a_literal_and_a_computed_one_is_not():
    nb = _nb("ratio = 1.5", "table = {'a': [1, 2]}", "ratio2 = 3 / 2", "ratio3 = 1.0\nratio3 = float('2')")
    assert A.is_literal(nb, "ratio") and A.is_literal(nb, "table")
    assert not A.is_literal(nb, "ratio2")  # an expression, not a number written out
    assert not A.is_literal(nb, "ratio3")  # its last assignment counts
    assert not A.is_literal(nb, "missing")


def test_magics_and_shell_lines_are_left_out_and_a_cell_that_does_not_parse_is_skipped():
    nb = _nb("%matplotlib inline\n!pip install x\nK = 2", "def broken(:", "def f(x):\n    return K * x")
    code, _preload, where = A.extract(nb, ["f"])
    assert "K = 2" in code and "pip" not in code and "matplotlib" not in code
    assert where == {"f": 2}
