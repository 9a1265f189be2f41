"""Notebooks in the repository carry no outputs, execution counts or machine-specific metadata."""

import json

from nbrun import ROOT, all_notebooks

from perflab.course.nbclean import is_clean


def test_notebooks_are_clean():
    dirty = [str(p.relative_to(ROOT)) for p in all_notebooks() if not is_clean(json.loads(p.read_text()))]
    assert not dirty, f"run `make clean-notebooks`: {dirty}"


def test_parameters_cell_first_and_smoke_param():
    for p in all_notebooks():
        nb = json.loads(p.read_text())
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert code, p
        first = code[0]
        assert "parameters" in first.get("metadata", {}).get("tags", []), f"{p.name}: first code cell not tagged 'parameters'"
        assert "smoke" in "".join(first["source"]), f"{p.name}: parameters cell lacks `smoke`"


def test_clean_detects_outputs():
    nb = {"cells": [{"cell_type": "code", "source": "1", "metadata": {}, "outputs": [{"output_type": "stream"}], "execution_count": 3}],
          "metadata": {}}
    assert not is_clean(nb)
    from perflab.course.nbclean import clean

    assert is_clean(clean(nb))
