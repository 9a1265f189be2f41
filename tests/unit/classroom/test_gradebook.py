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


# One class of every kind of submission, graded once per test session (per xdist worker: the tests
# that read it share one xdist group), each test below reading its learner's row or the class's forms.
GRADED_CLASS = pytest.mark.xdist_group("graded-class")


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    book, subs = grade_a_class(tmp_path_factory.mktemp("graded-class"))
    return book, subs, {r.learner: (r.outcome, r.message) for r in book.records}


@pytest.mark.parametrize("who,outcome", [("right", "done"), ("deleter", "done"), ("stan", "not done"),
                                         ("results", "not done"), ("wrong", "wrong"), ("raising", "error"),
                                         ("marker", "error"), ("hog", "error"), ("looping", "timeout"),
                                         ("mal", "error")])
@pytest.mark.slow
@GRADED_CLASS
def test_every_kind_of_submission_is_graded_as_it_should_be(graded, who, outcome):
    """Each learner of the class, its outcome and what its message says (the kernel's states and its
    marker line count for nothing; a run within its timeout, plus the time to stop a kernel)."""
    book, _, got = graded
    assert got[who][0] == outcome, (who, got[who])
    message = got[who][1]
    expected = {"stan": lambda m: "lcg_index" in m,  # the shipped lab, its stub
                # the check's own message, hint included, as the learner saw it
                "wrong": lambda m: m.startswith("lcg_index: for ") and "(a·i + c) mod n" in m,
                "raising": lambda m: m == "KeyError: 0", "hog": lambda m: m == "MemoryError",
                "looping": lambda m: m.startswith(f"still running after {TIMEOUT} s"),
                "mal": lambda m: m.startswith("malformed notebook (")}
    assert expected.get(who, lambda m: True)(message), (who, message)
    # the kernel's run and then the judge's, each within its timeout
    rec = next(r for r in book.records if r.learner == who)
    assert rec.seconds < 2 * TIMEOUT + 5, (who, rec.seconds)


@pytest.mark.slow
@GRADED_CLASS
def test_a_class_grading_leaves_the_originals_and_says_what_it_could_not_match(graded):
    """The copies protected the originals (the deleter's folder and everyone else's are untouched), and
    a notebook that names no lab is a note, not a learner."""
    book, subs, got = graded
    assert (subs / "deleter" / "keep.txt").read_text() == "the learner's own file"
    assert (subs / "right" / "right_lab7_attempt.ipynb").is_file()
    assert "bob" not in got and any(n.startswith("bob/notes.ipynb: no lab number or lab name") for n in book.notes)
    assert len(book.records) == 10


@pytest.mark.slow
@GRADED_CLASS
def test_a_graded_class_has_its_csv_json_and_one_screen_summary(graded):
    book, _, _ = graded
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


def test_where_no_cgroup_can_be_made_every_report_says_the_limits_are_per_process():
    limits = G.Limits(memory_bytes=2**30)
    grouped = G.describe_limits(limits, 1, type("Groups", (), {"version": "v1"})(), "", sandboxed=True, quota=True)
    assert grouped.startswith("each learner in its own cgroup (v1): memory 1.0 GiB with its children")
    alone = G.describe_limits(limits, 1, None, "no v1 pids hierarchy mounted", sandboxed=True, quota=False)
    assert alone.startswith("PER-PROCESS LIMITS ONLY: no cgroup could be made here (no v1 pids hierarchy mounted)")
    book = G.Gradebook([G.Record("ada", "07_shuffle", "done")], ["07_shuffle"], [], 1.0, 1, 5.0, limits=alone,
                       grouped=False)
    assert alone in book.summary() and "Limits: " not in book.summary()
    assert book.as_dict()["limits_per_learner"] is False and book.as_dict()["limits"] == alone
    assert list(csv.DictReader(io.StringIO(book.csv_text())))[0]["limits"] == "PER PROCESS ONLY"


def test_a_learner_whose_grading_fails_is_that_learners_record_and_the_class_goes_on(tmp_path, monkeypatch):
    course = tmp_path / "labs"
    write(course / "07_shuffle.ipynb", notebook([SETUP, STUB]))
    for who in ("ada", "bob", "cy"):
        write(tmp_path / "subs" / who / "07_shuffle.ipynb", notebook([SETUP, STUB]))

    def grade_one(sub, **kw):
        if sub.learner == "bob":
            raise RecursionError("maximum recursion depth exceeded")
        return G.Record(sub.learner, sub.lab.name, "not done", "1 of 1 checks not done")

    monkeypatch.setattr(G, "grade_one", grade_one)
    book = G.grade_folder(tmp_path / "subs", course=course, timeout=5, isolate=False)
    got = {r.learner: (r.outcome, r.message) for r in book.records}
    assert got["bob"] == ("error", "the grader failed on this notebook: RecursionError: maximum recursion depth exceeded")
    assert got["ada"][0] == got["cy"][0] == "not done"
