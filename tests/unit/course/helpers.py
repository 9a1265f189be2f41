"""Helpers the tests of this folder share."""

import json
from pathlib import Path

import nbformat


def _notebook(path: Path, code: str = "x = 1", outputs: list | None = None) -> Path:
    cell = nbformat.v4.new_code_cell(code)
    if outputs:
        cell.outputs = outputs
    nb = nbformat.v4.new_notebook(cells=[cell])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nbformat.writes(nb))
    return path


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
