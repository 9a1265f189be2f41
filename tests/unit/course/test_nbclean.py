"""Tests of `perflab.course.nbclean`."""

from __future__ import annotations

import json

import nbformat

from perflab.course import nbclean


def _nb(path, outputs=True):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(1)")
    if outputs:
        cell.outputs = [nbformat.v4.new_output("stream", text="1\n")]
        cell.execution_count = 1
    nb.cells = [cell]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb))
    return path


# ----------------------------------------------------------------------------- nbclean
def test_execution_metadata_or_a_foreign_kernel_make_a_notebook_dirty():
    from perflab.course import nbclean

    assert not nbclean.is_clean({"cells": [{"cell_type": "markdown", "metadata": {"execution": {}}}]})
    assert not nbclean.is_clean({"cells": [], "metadata": {"kernelspec": {"name": "conda-env-torch"}}})
    assert nbclean.is_clean({"cells": [], "metadata": {"kernelspec": dict(nbclean.KERNELSPEC)}})


def test_nbclean_checks_then_cleans_a_folder(tmp_path, capsys):
    dirty = _nb(tmp_path / "course" / "a.ipynb")
    _nb(tmp_path / "course" / "b.ipynb", outputs=False)
    _nb(tmp_path / "course" / ".ipynb_checkpoints" / "a-checkpoint.ipynb")  # Jupyter's copies are left alone
    assert nbclean.main(["--check", str(tmp_path / "course")]) == 1
    assert capsys.readouterr().out == f"dirty: {dirty}\n"
    assert nbclean.main([str(tmp_path / "course")]) == 0
    assert capsys.readouterr().out == f"cleaned: {dirty}\n"
    assert nbclean.is_clean(json.loads(dirty.read_text()))
    assert nbclean.main(["--check", str(dirty)]) == 0
