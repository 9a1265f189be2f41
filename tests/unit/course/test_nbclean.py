"""Tests of `perflab.course.nbclean`."""

from __future__ import annotations

import json

from perflab.course import nbclean

from .helpers import _nb


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
