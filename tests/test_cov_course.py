"""The course plumbing's edges: cleaning notebooks from the command line, the grader meeting folders
and files laid out the way learners really hand them in, and the release builder's refusals."""

from __future__ import annotations

import json
import os
import time

import nbformat
import pytest

from perflab.core.errors import InputError
from perflab.course import gradebook as G
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


def _course(tmp_path):
    labs = tmp_path / "labs"
    _nb(labs / "01_flops.ipynb", outputs=False)
    _nb(labs / "02_mfu.ipynb", outputs=False)
    (labs / "03_broken.ipynb").write_text("{not json")  # an unreadable lab still counts, with no checks
    return G.course_labs(labs)


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


def test_release_refuses_to_write_into_the_course_or_over_other_files(tmp_path):
    from perflab.course import release

    root = tmp_path / "course"
    for d in ("labs", "notebooks", "perflab"):
        (root / d).mkdir(parents=True)
    with pytest.raises(InputError, match="is inside the course's own folders"):
        release.build_release(root / "labs" / "out", root)
    (tmp_path / "out" / release.NAME).mkdir(parents=True)
    with pytest.raises(InputError, match="exists and is not an earlier release: remove it or choose another OUT"):
        release.build_release(tmp_path / "out", root)


def test_release_reads_cells_with_magics_and_gives_up_on_broken_code():
    from perflab.course import release

    tree = release._parse("%matplotlib inline\n!pip list\nx = lab.check_flops(1)\n")
    assert tree is not None and "check_flops" in __import__("ast").dump(tree)
    assert release._parse("def broken(:\n") is None


def test_a_report_part_whose_table_and_figure_cannot_be_drawn_still_shows_the_rest():
    from perflab.course import report_html as H

    part = {"title": "Wave sweep", "status": "ok", "summary": "best 1 TFLOP/s", "figures": [],
            "data": {"rows": "not rows"}, "notes": ["a note"], "wall_s": 1.0, "measured": "today"}
    html = H._section("waves", part)
    assert "figure not drawn:" in html and "a note" in html and "best 1 TFLOP/s" in html


def test_prediction_repr_and_a_record_that_cannot_be_written(tmp_path, monkeypatch):
    from perflab.course import predict

    p = predict.Prediction("10", "k", "speed-up here", unit="×")
    assert repr(p) == "Predict: speed-up here [×] — not entered yet"
    p2 = predict.Prediction("10", "k", "speed-up here", unit="×", given=1.5)
    assert repr(p2) == "Predict: speed-up here [×] — 1.5"
    ro = tmp_path / "read-only"
    ro.mkdir()
    (ro / "predictions.jsonl").mkdir()  # a folder where the record file should be: the write fails
    monkeypatch.setenv("PERFLAB_RESULTS", str(ro))
    predict._append({"lesson": "10"})  # the lesson goes on; the record stays in memory
    monkeypatch.setattr("perflab.core.device.describe", lambda *a: (_ for _ in ()).throw(RuntimeError("no device")))
    assert predict._device_name() == "unknown"


def test_lesson_context_picks_the_full_size_on_a_gpu():
    import torch

    from perflab.course.notebook import Context

    gpu = Context(torch.device("cuda"), None, None, smoke=False)
    cpu = Context(torch.device("cpu"), None, None, smoke=False)
    assert gpu.pick(full=4096, smoke=64, cpu=512) == 4096 and cpu.pick(full=4096, smoke=64, cpu=512) == 512
    assert cpu.pick(full=4096, smoke=64) == 4096  # no CPU size given: the full one


def test_reference_files_that_are_broken_or_of_another_kind_are_skipped(tmp_path):
    from perflab.course import reference as ref

    (tmp_path / "waves__a.json").write_text("{broken")
    (tmp_path / "waves__b.json").write_text(json.dumps({"kind": "mamf", "provenance": {}, "rows": []}))
    (tmp_path / "waves__c.json").write_text(json.dumps({"kind": "waves", "provenance": {"device": "cpu"},
                                                        "params": {}, "rows": [], "summary": {}}))
    assert ref.load_references("waves", tmp_path) == []  # a CPU run is not GPU reference data
    assert [r.path.name for r in ref.load_references("waves", tmp_path, gpu_only=False)] == ["waves__c.json"]
    assert ref.load_references("waves", tmp_path / "none") == []
    from perflab.core.results import jsonable

    assert jsonable(2) == 2.0 and jsonable(object).startswith("<class")
