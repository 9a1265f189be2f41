"""Tests of `perflab.classroom.gradebook`."""

from __future__ import annotations

import csv
import io
import json
import os
import resource
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from perflab.classroom import gradebook, sandbox
from perflab.classroom import gradebook as G
from perflab.classroom import gradebook as gb
from perflab.core.errors import InputError
from tests.unit.course.helpers import _nb, _notebook


def _fake_runner(monkeypatch, executed: str | None, log: str, predictions: str = ""):
    """grade_one's runner process, replaced: it writes `log` and (unless None) `executed` as the
    executed notebook, and `predictions` into the submission's results folder."""
    def popen(cmd, *, cwd, env, stdin, stdout, stderr, start_new_session):
        stdout.write(log.encode())
        if executed is not None:
            Path(cmd[4]).write_text(executed)
        if predictions:
            (Path(env["PERFLAB_RESULTS"]) / "predictions.jsonl").write_text(predictions)
        return SimpleNamespace(wait=lambda timeout=None: 0)

    fake = SimpleNamespace(Popen=popen, TimeoutExpired=subprocess.TimeoutExpired, DEVNULL=subprocess.DEVNULL,
                           STDOUT=subprocess.STDOUT)
    monkeypatch.setattr(G, "subprocess", fake)
    monkeypatch.setattr(G, "_kill_tree", lambda proc: None)


def _submission(tmp_path) -> G.Submission:
    path = _notebook(tmp_path / "alice" / "01_flops.ipynb", "lab.check_flops(1)")
    return G.Submission("alice", G.Lab("01", "01_flops", path, ("check_flops",), predicts=True), path)


# ----------------------------------------------------------------------------- gradebook: limits
def _fake_limits(monkeypatch, refuse=()):
    """resource.getrlimit/setrlimit on a table of this test's own: the test process keeps its limits."""
    table = {resource.RLIMIT_AS: (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
             resource.RLIMIT_DATA: (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
             resource.RLIMIT_CPU: (resource.RLIM_INFINITY, 500),
             resource.RLIMIT_FSIZE: (resource.RLIM_INFINITY, resource.RLIM_INFINITY)}
    set_calls = []

    def setrlimit(which, limits):
        if which in refuse:
            raise ValueError("current limit exceeds maximum limit")
        set_calls.append((which, limits))
        table[which] = limits

    monkeypatch.setattr(resource, "getrlimit", lambda which: table[which])
    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    monkeypatch.setattr(gradebook, "_has_nvidia_gpu", lambda: False)
    return set_calls


def _course(tmp_path):
    labs = tmp_path / "labs"
    _nb(labs / "01_flops.ipynb", outputs=False)
    _nb(labs / "02_mfu.ipynb", outputs=False)
    (labs / "03_broken.ipynb").write_text("{not json")  # an unreadable lab still counts, with no checks
    return G.course_labs(labs)


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
def test_without_labs_here_or_beside_the_package_there_is_no_default_course(tmp_path, monkeypatch):
    import perflab

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(perflab, "__file__", str(tmp_path / "site" / "perflab" / "__init__.py"))
    assert G.default_labs_dir() is None
    with pytest.raises(InputError, match=r"^no course labs at labs/: pass --course PATH/TO/labs"):
        G.course_labs()
    _notebook(tmp_path / "labs" / "01_flops.ipynb")
    assert G.default_labs_dir().resolve() == (tmp_path / "labs").resolve()


def test_blank_lab_names_are_ignored_and_hidden_folders_are_not_learners(tmp_path):
    labs = {"01": G.Lab("01", "01_flops", tmp_path / "01_flops.ipynb", ()),
            "02": G.Lab("02", "02_mfu", tmp_path / "02_mfu.ipynb", ())}
    assert list(G.pick_labs(labs, ["", " 02 ", "  "])) == ["02"]
    root = tmp_path / "hand-in"
    _notebook(root / ".git" / "01_flops.ipynb")  # a hidden folder beside the learners' ones
    mine = _notebook(root / "alice" / "01_flops.ipynb")
    subs, notes = G.find_submissions(root, labs)
    assert [(s.learner, s.path) for s in subs] == [("alice", mine)] and notes == []


def test_a_notebook_that_reads_but_does_not_validate_is_malformed_in_one_line(tmp_path):
    doc = json.loads(_notebook(tmp_path / "a.ipynb").read_text())
    doc["cells"][0]["execution_count"] = "one"
    (tmp_path / "a.ipynb").write_text(json.dumps(doc))
    assert G.load_notebook(tmp_path / "a.ipynb") == (None, "malformed notebook ('one' is not of type 'integer', 'null')")


def test_predictions_file_lines_that_are_not_json_objects_are_skipped(tmp_path):
    (tmp_path / "predictions.jsonl").write_text('{"lesson": "01", "key": "k", "predicted": 2.0, "extra": 1}\n'
                                                "not json\n[1, 2]\n")
    (row,) = G.read_predictions(tmp_path)
    assert row["lesson"] == "01" and row["predicted"] == 2.0 and "extra" not in row
    assert list(row) == list(G.PREDICTION_FIELDS)


def test_a_runner_that_leaves_a_half_written_notebook_is_an_error_with_its_log(tmp_path, monkeypatch):
    _fake_runner(monkeypatch, executed="{half a notebo", log="starting\nOSError: no kernel named python3\n",
                 predictions='{"lesson": "01", "key": "k", "predicted": 1.0}\n{broken\n')
    rec = G.grade_one(_submission(tmp_path), timeout=5, limits=G.Limits())
    assert rec.outcome == "error"
    assert rec.message == "the kernel could not run the notebook: OSError: no kernel named python3"
    assert [p["key"] for p in rec.predictions] == ["k"]


def test_predictions_are_recorded_only_for_a_lab_that_asks_for_them(tmp_path, monkeypatch):
    _fake_runner(monkeypatch, executed="{half a notebo", log="OSError: no kernel\n",
                 predictions='{"lesson": "07", "key": "k", "predicted": 1.0}\n')
    sub = _submission(tmp_path)
    sub.lab = G.Lab("07", "07_shuffle", sub.path, ("check_index",), predicts=False)
    assert G.grade_one(sub, timeout=5, limits=G.Limits()).predictions == []


def test_a_notebook_cut_short_names_the_runners_last_error_and_the_likely_limit(tmp_path, monkeypatch):
    executed = _notebook(tmp_path / "executed.ipynb", "lab.check_flops(1)",
                         [nbformat.v4.new_output("stream", text="measuring\n")]).read_text()
    _fake_runner(monkeypatch, executed=executed, log="running cell 1\nMemoryError\nshutting down\n")
    rec = G.grade_one(_submission(tmp_path), timeout=5, limits=G.Limits())
    assert (rec.outcome, rec.message) == ("error", "MemoryError (memory or CPU-time limit?)")


def test_a_timeout_without_a_running_cell_names_none():
    assert G._running_cell(None) == ""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nb.cells[0].metadata["papermill"] = {"status": "completed"}
    assert G._running_cell(nb) == ""
    nb.cells[0].metadata["papermill"] = {"status": "running"}
    assert G._running_cell(nb) == " (cell 0: x = 1)"


def test_killing_the_runner_survives_a_child_that_is_already_gone(monkeypatch):
    import psutil

    runner = subprocess.Popen(["sleep", "30"])
    gone = subprocess.Popen(["true"])
    ghost = psutil.Process(gone.pid)
    gone.wait()
    monkeypatch.setattr(psutil.Process, "children", lambda self, recursive=False: [ghost])
    G._kill_tree(runner)
    assert runner.returncode == -signal.SIGKILL and not ghost.is_running()


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


def test_a_limit_switched_off_is_left_as_it_is(monkeypatch):
    set_calls = _fake_limits(monkeypatch)
    gradebook.Limits(memory_bytes=None, cpu_s=None, file_bytes=None).apply(cpu_s=120)
    assert set_calls == [(resource.RLIMIT_CPU, (120, 120))]  # only the CPU time, from the timeout
    set_calls.clear()
    gradebook.Limits(memory_bytes=None, cpu_s=900, file_bytes=None).apply(cpu_s=120)
    assert set_calls == [(resource.RLIMIT_CPU, (120, 120))]  # the hard limit (120 now) is never raised


def test_a_limit_the_system_refuses_is_reported_and_the_others_still_apply(monkeypatch, capsys):
    set_calls = _fake_limits(monkeypatch, refuse=(resource.RLIMIT_AS,))
    gradebook.Limits(memory_bytes=2**30, cpu_s=None, file_bytes=2**20).apply(cpu_s=60)
    assert capsys.readouterr().out == ("perflab grade: this system does not take that limit "
                                       "(current limit exceeds maximum limit); running without it\n")
    assert set_calls == [(resource.RLIMIT_CPU, (60, 60)), (resource.RLIMIT_FSIZE, (2**20, 2**20))]


def test_course_labs_refuse_a_folder_without_labs(tmp_path):
    with pytest.raises(InputError, match="no course labs at .*nowhere: pass --course"):
        G.course_labs(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no lab notebooks \\(NN_name.ipynb\\) in .*empty"):
        G.course_labs(tmp_path / "empty")
    labs = _course(tmp_path)
    assert list(labs) == ["01", "02", "03"] and labs["03"].checks == ()


def test_submissions_as_learners_hand_them_in(tmp_path):
    labs = _course(tmp_path)
    root = tmp_path / "hand-in"
    _nb(root / "loose_01_flops.ipynb")  # not in a learner's folder
    _nb(root / "alice" / ".ipynb_checkpoints" / "01_flops-checkpoint.ipynb")
    old = _nb(root / "alice" / "01_flops.ipynb")
    new = _nb(root / "alice" / "v2" / "01_flops copy.ipynb")
    os.utime(old, (time.time() - 100, time.time() - 100))
    _nb(root / "bob" / "lab 7.ipynb")  # a lab this course does not have
    _nb(root / "bob" / "homework.ipynb")  # no lab number or name at all
    subs, notes = G.find_submissions(root, labs)
    assert [(s.learner, s.lab.number, s.path) for s in subs] == [("alice", "01", new)]
    assert any(n.startswith("loose_01_flops.ipynb: not in a learner's folder") for n in notes)
    assert any(n.startswith("alice: 2 notebooks for lab 01; graded the newest, v2/01_flops copy.ipynb") for n in notes)
    assert any(n.startswith("bob/lab 7.ipynb: no lab 07 in this course (its labs: 01, 02, 03)") for n in notes)
    assert any(n.startswith("bob/homework.ipynb: no lab number or lab name in the file name") for n in notes)


def test_malformed_notebooks_and_runner_logs_are_one_line(tmp_path):
    bad = tmp_path / "bad.ipynb"
    bad.write_text(json.dumps({"cells": "oops", "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    nb, why = G.load_notebook(bad)
    assert nb is None and why.startswith("malformed notebook (")
    md = nbformat.v4.new_notebook()
    md.cells = [nbformat.v4.new_markdown_cell("only text")]
    (tmp_path / "md.ipynb").write_text(json.dumps(md))
    assert G.load_notebook(tmp_path / "md.ipynb") == (None, "malformed notebook (no code cells)")
    log = tmp_path / "runner.log"
    assert G._last_line(log) == "no output"
    log.write_text("starting\nTraceback (most recent call last):\nRuntimeError: the kernel died\nbye\n")
    assert G._last_line(log) == "RuntimeError: the kernel died"


def test_classify_a_notebook_that_stopped_before_its_end(tmp_path):
    labs = _course(tmp_path)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("lab.check_x(1)")
    cell.outputs = [nbformat.v4.new_output("stream", text=G.MARK + "{not json\n")]
    nb.cells = [cell]
    outcome, message = G.classify(nb, labs["01"])
    assert outcome == "error" and message.startswith("the notebook stopped before its end")


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


def test_matching_names_to_labs(tmp_path):
    labs = {n: gb.Lab(n, f"{n}_{t}", tmp_path, ()) for n, t in (("01", "flops"), ("07", "shuffle"), ("10", "graph_breaks"))}

    def number(name: str) -> str | None:
        lab = gb.match_lab(name, labs)
        return lab.number if lab else None

    assert number("01_flops.ipynb") == "01"
    assert number("Lab 7 - shuffle (1).ipynb") == "07"
    assert number("alice_10_graph_breaks.ipynb") == "10"
    assert number("graph_breaks.ipynb") == "10"
    assert gb.match_lab("notes.ipynb", labs) is None
    assert gb.match_lab("03_memory.ipynb", labs) is None
    assert list(gb.pick_labs(labs, ["1", "shuffle"])) == ["01", "07"]
    with pytest.raises(gb.InputError, match="no lab '42' in this course: choose from 01, 07, 10"):
        gb.pick_labs(labs, ["42"])


def test_a_removed_check_cell_is_not_done(tmp_path):
    """Deleting a check's cell does not make a lab pass: the shipped lab's check calls must be there.
    Nothing the kernel printed counts for more than 'it ran to its end'."""
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("def double(x):\n    return 2 * x")])
    nb.cells.append(nbformat.v4.new_code_cell(gb.GRADE_CELL, outputs=[
        nbformat.v4.new_output("stream", name="stdout", text=gb.MARK + "end\n")]))
    lab = gb.Lab("99", "99_double", tmp_path, ("check_double",))
    assert gb.classify(nb, lab) == ("not done", "check cell removed: check_double")
    nb.cells[0].source += "\nlab.check_double(double)"
    assert gb.classify(nb, lab) == ("ran", "")
    nb.cells[1].outputs[0].text = gb.MARK + '{"double": "passed"}\n'  # the old states line: not even "it ran"
    assert gb.classify(nb, lab)[0] == "error"
    nb.cells[1].outputs = []
    assert gb.classify(nb, lab)[0] == "error"
