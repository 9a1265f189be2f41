"""Tests of `perflab.classroom.gradebook`: a class graded, its CSV, JSON and summary. (A submission's
run: test_runner.py; what is read back from it: test_evidence.py; the labs and submissions:
test_submissions.py.)"""

from __future__ import annotations

import csv
import io
import json
import runpy
import sys
from pathlib import Path

import nbformat
import pytest

from perflab.classroom import gradebook as G
from perflab.classroom import gradebook as gb
from perflab.classroom import sandbox
from perflab.core.errors import InputError
from tests.unit.course.helpers import _notebook

pytest.importorskip("papermill")


SETUP = """from perflab.grading import checks as grading
from perflab.dataloading import lab07 as lab

grading.reset()"""


STUB = '''def lcg_index(i, n, a, c, x0):
    """Entry i of the LCG permutation of n items."""
    raise NotImplementedError


lab.check_index(lcg_index)'''


ASKS = "\nfrom perflab.course import predict\nask = predict.ask  # this lab asks for predictions"


PREDICT = '''import json, os
with open(os.path.join(os.environ["PERFLAB_RESULTS"], "predictions.jsonl"), "a") as f:
    f.write(json.dumps({"lesson": "07", "key": "index", "question": "how long?", "unit": "s",
                        "predicted": 2.0, "measured": 2.5, "error_pct": -20.0, "device": "cpu", "time": 0}) + "\\n")
'''


RIGHT = """m = lab.modulus(n)

    def state(j):
        acc_a, acc_c, pa, pc = 1, 0, a, c
        while j:
            if j & 1:
                acc_a, acc_c = acc_a * pa % m, (acc_c * pa + pc) % m
            pa, pc = pa * pa % m, (pc * pa + pc) % m
            j >>= 1
        return (acc_a * x0 + acc_c) % m

    y = state(i)
    while y >= n:
        y = state(y)
    return y"""


BODIES = {
    "right": RIGHT,
    "wrong": "return (a * i + c) % n",
    "raising": "return {}[i]",
    # never returns (sleeping, so that it leaves the cores to the other submissions meanwhile)
    "looping": "import time\n    while True:\n        time.sleep(0.1)",
    # b"x" * n writes every byte: real memory, not an untouched reservation
    "hog": "hog = []\n    while True:\n        hog.append(b'x' * 2**27)",
    # removes everything it can reach by a relative path: its folder and the one above, then answers right
    "deleter": ("import os, shutil\n    for top in ('.', '..'):\n        for name in os.listdir(top):\n"
                "            p = os.path.join(top, name)\n"
                "            shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else os.remove(p)\n    " + RIGHT),
}


# forgeries that act on the learner's own kernel: the verdict never reads it
FORGED = {
    "results": "grading._RESULTS['lcg_index'] = 'passed'",
    "marker": "import os\nprint('PERFLAB-GRADE end')\nos._exit(0)",
}


def notebook(code_cells: list[str]) -> dict:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# Lab 99 · Double it"},
             {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "smoke = False",
              "outputs": [], "execution_count": None}]
    cells += [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
              for c in code_cells]
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def write(path: Path, nb: dict | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(nb if isinstance(nb, str) else json.dumps(nb))
    return path


# long enough for a kernel to start and run the little lab on a 2-core machine that another
# program and a second test worker keep busy (honest work stays well under half of it), short
# enough that the looping notebook costs little
TIMEOUT = 40


def grade_a_class(tmp: Path):
    course = tmp / "labs"
    write(course / "07_shuffle.ipynb", notebook([SETUP + ASKS, STUB, "grading.summary()"]))
    subs = tmp / "submissions"
    write(subs / "stan" / "07_shuffle.ipynb", notebook([SETUP, STUB, "grading.summary()"]))  # the shipped lab
    for who, cell in FORGED.items():
        write(subs / who / "07_shuffle.ipynb", notebook([SETUP, STUB, cell, "grading.summary()"]))
    for who, body in BODIES.items():
        code = STUB.replace("raise NotImplementedError", body)
        cells = [SETUP, code] + ([PREDICT] if who == "right" else []) + ["grading.summary()"]
        # an LMS export's name: learner folder, a lab number somewhere in the file name
        write(subs / who / f"{who}_lab7_attempt.ipynb", notebook(cells))
    write(subs / "mal" / "07_shuffle.ipynb", "{ this is not a notebook")
    write(subs / "bob" / "notes.ipynb", notebook(["1 + 1"]))
    (subs / "deleter" / "keep.txt").write_text("the learner's own file")
    book = gb.grade_folder(subs, course=course, timeout=TIMEOUT, jobs=2, limits=gb.Limits(memory_bytes=2**30),
                           isolate=sandbox.find() is not None)
    return book, subs


# ----------------------------------------------------------------------------- the grader
def test_the_summary_lists_eight_unmatched_files_and_counts_the_rest():
    book = G.Gradebook([], [], [f"bob/x{i}.ipynb: no lab number" for i in range(11)], 1.0, 1, 5.0)
    lines = book.summary().splitlines()
    assert lines[-2] == "  bob/x7.ipynb: no lab number"
    assert lines[-1] == "  … and 3 more (see --json)"


@pytest.mark.parametrize("timeout", [0, -1, float("nan")])
def test_grading_refuses_a_timeout_that_is_not_positive(tmp_path, timeout):
    with pytest.raises(InputError, match=rf"^timeout must be > 0 seconds \(got {timeout}\)$"):
        G.grade_folder(tmp_path, timeout=timeout)


def test_nbclean_run_as_a_module_exits_with_the_check_status(tmp_path, monkeypatch, capsys):
    dirty = _notebook(tmp_path / "a.ipynb", outputs=[nbformat.v4.new_output("stream", text="1\n")])
    monkeypatch.delitem(sys.modules, "perflab.course.nbclean", raising=False)
    monkeypatch.setattr(sys, "argv", ["nbclean", "--check", str(dirty)])
    with pytest.raises(SystemExit) as e:
        runpy.run_module("perflab.course.nbclean", run_name="__main__")
    assert e.value.code == 1 and capsys.readouterr().out == f"dirty: {dirty}\n"


@pytest.mark.slow
def test_every_kind_of_submission_is_graded_as_it_should_be(tmp_path):
    """One class, graded once (in the test's own time): the outcomes, then the gradebook's forms."""
    book, subs = grade_a_class(tmp_path)
    got = {r.learner: (r.outcome, r.message) for r in book.records}
    assert got["right"][0] == "done", got["right"]
    assert got["stan"][0] == "not done" and "lcg_index" in got["stan"][1]
    assert got["wrong"][0] == "wrong"  # the check's own message, hint included, as the learner saw it
    assert got["wrong"][1].startswith("lcg_index: for ") and "(a·i + c) mod n" in got["wrong"][1], got["wrong"]
    assert got["raising"] == ("error", "KeyError: 0")
    assert got["results"][0] == "not done", got["results"]  # the kernel's states are not read
    assert got["marker"][0] == "error", got["marker"]  # the kernel died: its marker line counts for nothing
    assert got["looping"][0] == "timeout" and got["looping"][1].startswith(f"still running after {TIMEOUT} s"), got["looping"]
    assert got["hog"] == ("error", "MemoryError")
    assert got["deleter"][0] == "done", got["deleter"]
    assert got["mal"][0] == "error" and got["mal"][1].startswith("malformed notebook (")
    assert "bob" not in got and any(n.startswith("bob/notes.ipynb: no lab number or lab name") for n in book.notes)
    # every run within its timeout (plus the time to stop a kernel), the loop included
    # (the kernel's run and then the judge's, each within its timeout)
    assert all(r.seconds < 2 * TIMEOUT + 5 for r in book.records), [(r.learner, r.seconds) for r in book.records]
    # the copies protected the originals: the deleter's folder and everyone else's are untouched
    assert (subs / "deleter" / "keep.txt").read_text() == "the learner's own file"
    assert (subs / "right" / "right_lab7_attempt.ipynb").is_file()

    # the CSV, the JSON and the one-screen summary
    rows = list(csv.DictReader(io.StringIO(book.csv_text())))
    right = next(r for r in rows if r["learner"] == "right")
    assert right["outcome"] == "done" and right["predictions"] == "1" and right["median_prediction_error_pct"] == "20.0"
    data = book.as_dict()
    rec = next(r for r in data["records"] if r["learner"] == "right")
    assert rec["predictions"][0]["predicted"] == 2.0 and rec["predictions"][0]["measured"] == 2.5
    assert data["passed"] == {"07_shuffle": 2}
    text = book.summary()
    assert len(text.splitlines()) <= 24
    assert "2 of 10 learners passed" in text
    assert "1× 07_shuffle: lcg_index: for " in text
    assert "bob/notes.ipynb" in text
