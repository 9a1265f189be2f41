"""Tests of `perflab.classroom.evidence`: what the grader reads back from a learner's run."""

from __future__ import annotations

import json

import nbformat
import pytest

from perflab.classroom import evidence as E
from perflab.classroom.submissions import Lab, course_labs
from tests.unit.course.helpers import _nb, _notebook

pytest.importorskip("papermill")


def _course(tmp_path):
    labs = tmp_path / "labs"
    _nb(labs / "01_flops.ipynb", outputs=False)
    return course_labs(labs)


def test_a_notebook_that_reads_but_does_not_validate_is_malformed_in_one_line(tmp_path):
    doc = json.loads(_notebook(tmp_path / "a.ipynb").read_text())
    doc["cells"][0]["execution_count"] = "one"
    (tmp_path / "a.ipynb").write_text(json.dumps(doc))
    assert E.load_notebook(tmp_path / "a.ipynb") == (None, "malformed notebook ('one' is not of type 'integer', 'null')")


def test_predictions_file_lines_that_are_not_json_objects_are_skipped(tmp_path):
    (tmp_path / "predictions.jsonl").write_text('{"lesson": "01", "key": "k", "predicted": 2.0, "extra": 1}\n'
                                                "not json\n[1, 2]\n")
    (row,) = E.read_predictions(tmp_path)
    assert row["lesson"] == "01" and row["predicted"] == 2.0 and "extra" not in row
    assert list(row) == list(E.PREDICTION_FIELDS)


def test_a_timeout_without_a_running_cell_names_none():
    assert E.running_cell(None) == ""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nb.cells[0].metadata["papermill"] = {"status": "completed"}
    assert E.running_cell(nb) == ""
    nb.cells[0].metadata["papermill"] = {"status": "running"}
    assert E.running_cell(nb) == " (cell 0: x = 1)"


def test_malformed_notebooks_and_runner_logs_are_one_line(tmp_path):
    bad = tmp_path / "bad.ipynb"
    bad.write_text(json.dumps({"cells": "oops", "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    nb, why = E.load_notebook(bad)
    assert nb is None and why.startswith("malformed notebook (")
    md = nbformat.v4.new_notebook()
    md.cells = [nbformat.v4.new_markdown_cell("only text")]
    (tmp_path / "md.ipynb").write_text(json.dumps(md))
    assert E.load_notebook(tmp_path / "md.ipynb") == (None, "malformed notebook (no code cells)")
    log = tmp_path / "runner.log"
    assert E.last_line(log) == "no output"
    log.write_text("starting\nTraceback (most recent call last):\nRuntimeError: the kernel died\nbye\n")
    assert E.last_line(log) == "RuntimeError: the kernel died"


def test_classify_a_notebook_that_stopped_before_its_end(tmp_path):
    labs = _course(tmp_path)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("lab.check_x(1)")
    cell.outputs = [nbformat.v4.new_output("stream", text=E.MARK + "{not json\n")]
    nb.cells = [cell]
    outcome, message = E.classify(nb, labs["01"])
    assert outcome == "error" and message.startswith("the notebook stopped before its end")


def test_a_removed_check_cell_is_not_done(tmp_path):
    """Deleting a check's cell does not make a lab pass: the shipped lab's check calls must be there.
    Nothing the kernel printed counts for more than 'it ran to its end'."""
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("def double(x):\n    return 2 * x")])
    nb.cells.append(nbformat.v4.new_code_cell(E.GRADE_CELL, outputs=[
        nbformat.v4.new_output("stream", name="stdout", text=E.MARK + "end\n")]))
    lab = Lab("99", "99_double", tmp_path, ("check_double",))
    assert E.classify(nb, lab) == ("not done", "check cell removed: check_double")
    nb.cells[0].source += "\nlab.check_double(double)"
    assert E.classify(nb, lab) == ("ran", "")
    nb.cells[1].outputs[0].text = E.MARK + '{"double": "passed"}\n'  # the old states line: not even "it ran"
    assert E.classify(nb, lab)[0] == "error"
    nb.cells[1].outputs = []
    assert E.classify(nb, lab)[0] == "error"


def test_a_notebook_built_to_exhaust_a_parser_is_parsed_in_a_limited_process(tmp_path):
    """4 MiB of empty dicts in a cell's metadata: read apart, in a process of its own, whatever it costs
    there; this process reads one line back."""
    import resource

    head = json.dumps({"cells": [{"cell_type": "code", "source": "x", "outputs": [], "execution_count": None,
                                  "metadata": {"x": []}}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    bomb = head.replace('"x": []', '"x": [' + ",".join(["{}"] * (4 * 2**20 // 3)) + "]")
    (tmp_path / "executed.ipynb").write_text(bomb)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ev = E.examine(tmp_path / "executed.ipynb", None, ["check_x"])
    assert ev.outcome == "error" and ev.message.startswith("the notebook stopped before its end"), ev
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 2**10  # kB
    assert E.examine(tmp_path / "missing.ipynb", None, []).outcome is None


def test_a_notebook_is_run_with_only_its_cells_types_sources_and_tags():
    """A learner's metadata (4 MiB of `{}` in the hostile corpus) and outputs never reach papermill, which
    would parse, validate and write them again at every cell; the `parameters` tag stays."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("smoke = False"), nbformat.v4.new_code_cell("x = 1")])
    nb.cells[0].metadata["tags"] = ["parameters", 7, "x" * 500]
    nb.cells[1].metadata["x"] = [{}] * 50_000
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="forged\n")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python", "env": {"A": "1"}}
    nb.metadata["papermill"] = {"parameters": {"smoke": False}}
    got, why = E.load_notebook(json.dumps(nb).encode())
    assert why == "" and got is not None
    assert got.cells[0].metadata == {"tags": ["parameters"]} and got.cells[1].metadata == {}
    assert got.cells[1].outputs == [] and [c.source for c in got.cells] == ["smoke = False", "x = 1"]
    assert dict(got.metadata) == {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    assert E.runnable([1, 2]) == [1, 2] and E.runnable({"cells": "oops"}) == {"cells": "oops"}  # for the validator


ALONE_PROBE = """
import json, sys
from pathlib import Path
from perflab.classroom import evidence as E
E.need_papermill(alone=True)
good, bad = Path(sys.argv[1]), Path(sys.argv[2])
print(json.dumps({"good": E.load_notebook(good)[1], "bad": E.load_notebook(bad)[1],
                  "jsonschema": "jsonschema" in sys.modules, "iri": sys.modules.get("rfc3987_syntax", "absent") is None}))
"""


def test_the_runner_reads_notebooks_without_the_iri_grammar_and_still_validates_them(tmp_path):
    """need_papermill(alone=True), as the runner process calls it: jsonschema is loaded, its IRI grammar
    is not, and a notebook that does not validate is still malformed while a valid one loads."""
    import subprocess
    import sys

    good = _notebook(tmp_path / "good.ipynb")
    doc = json.loads(good.read_text())
    doc["cells"][0]["execution_count"] = "one"
    bad = tmp_path / "bad.ipynb"
    bad.write_text(json.dumps(doc))
    run = subprocess.run([sys.executable, "-c", ALONE_PROBE, str(good), str(bad)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["good"] == "" and got["bad"] == "malformed notebook ('one' is not of type 'integer', 'null')", got
    assert got["jsonschema"] and got["iri"], got
