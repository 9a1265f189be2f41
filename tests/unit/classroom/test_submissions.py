"""Tests of `perflab.classroom.submissions`: the course's labs and a class's submissions."""

from __future__ import annotations

import os
import time

import pytest

from perflab.classroom import submissions as S
from perflab.classroom.boxes import remove_tree
from perflab.core.errors import InputError
from tests.unit.course.helpers import _nb, _notebook


def _course(tmp_path):
    labs = tmp_path / "labs"
    _nb(labs / "01_flops.ipynb", outputs=False)
    _nb(labs / "02_mfu.ipynb", outputs=False)
    (labs / "03_broken.ipynb").write_text("{not json")  # an unreadable lab still counts, with no checks
    return S.course_labs(labs)


def test_without_labs_here_or_beside_the_package_there_is_no_default_course(tmp_path, monkeypatch):
    import perflab

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(perflab, "__file__", str(tmp_path / "site" / "perflab" / "__init__.py"))
    assert S.default_labs_dir() is None
    with pytest.raises(InputError, match=r"^no course labs at labs/: pass --course PATH/TO/labs"):
        S.course_labs()
    _notebook(tmp_path / "labs" / "01_flops.ipynb")
    found = S.default_labs_dir()
    assert found is not None and found.resolve() == (tmp_path / "labs").resolve()


def test_blank_lab_names_are_ignored_and_hidden_folders_are_not_learners(tmp_path):
    labs = {"01": S.Lab("01", "01_flops", tmp_path / "01_flops.ipynb", ()),
            "02": S.Lab("02", "02_mfu", tmp_path / "02_mfu.ipynb", ())}
    assert list(S.pick_labs(labs, ["", " 02 ", "  "])) == ["02"]
    root = tmp_path / "hand-in"
    _notebook(root / ".git" / "01_flops.ipynb")  # a hidden folder beside the learners' ones
    mine = _notebook(root / "alice" / "01_flops.ipynb")
    subs, notes = S.find_submissions(root, labs)
    assert [(s.learner, s.path) for s in subs] == [("alice", mine)] and notes == []


def test_course_labs_refuse_a_folder_without_labs(tmp_path):
    with pytest.raises(InputError, match="no course labs at .*nowhere: pass --course"):
        S.course_labs(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no lab notebooks \\(NN_name.ipynb\\) in .*empty"):
        S.course_labs(tmp_path / "empty")
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
    subs, notes = S.find_submissions(root, labs)
    assert [(s.learner, s.lab.number, s.path) for s in subs] == [("alice", "01", new)]
    assert any(n.startswith("loose_01_flops.ipynb: not in a learner's folder") for n in notes)
    assert any(n.startswith("alice: 2 notebooks for lab 01; graded the newest, v2/01_flops copy.ipynb") for n in notes)
    assert any(n.startswith("bob/lab 7.ipynb: no lab 07 in this course (its labs: 01, 02, 03)") for n in notes)
    assert any(n.startswith("bob/homework.ipynb: no lab number or lab name in the file name") for n in notes)


def test_matching_names_to_labs(tmp_path):
    labs = {n: S.Lab(n, f"{n}_{t}", tmp_path, ()) for n, t in (("01", "flops"), ("07", "shuffle"), ("10", "graph_breaks"))}

    def number(name: str) -> str | None:
        lab = S.match_lab(name, labs)
        return lab.number if lab else None

    assert number("01_flops.ipynb") == "01"
    assert number("Lab 7 - shuffle (1).ipynb") == "07"
    assert number("alice_10_graph_breaks.ipynb") == "10"
    assert number("graph_breaks.ipynb") == "10"
    assert S.match_lab("notes.ipynb", labs) is None
    assert S.match_lab("03_memory.ipynb", labs) is None
    assert list(S.pick_labs(labs, ["1", "shuffle"])) == ["01", "07"]
    with pytest.raises(InputError, match="no lab '42' in this course: choose from 01, 07, 10"):
        S.pick_labs(labs, ["42"])


def test_a_learners_folder_is_walked_without_recursion_links_and_names_shown_as_they_differ(tmp_path):
    """A folder deeper than the walk goes (and deeper than Python's recursion) is one line; a link
    to a folder is not followed; a name with an invisible character is its own learner, escaped."""
    labs = _course(tmp_path)
    root = tmp_path / "hand-in"
    _notebook(root / "ada" / "01_flops.ipynb")
    _notebook(root / "ada\u200b" / "01_flops.ipynb")
    (root / "ada" / "elsewhere").symlink_to(tmp_path / "labs")  # the course's labs, through a link
    here = os.getcwd()
    try:
        os.chdir(root / "ada")
        for _ in range(1200):
            os.mkdir("d")
            os.chdir("d")
    finally:
        os.chdir(here)
    try:
        subs, notes = S.find_submissions(root, labs)
    finally:
        remove_tree(root / "ada" / "d")  # pytest's own cleanup of old temporary folders recurses
    assert sorted(s.learner for s in subs) == ["ada", "ada\u200b"] and all(s.lab.number == "01" for s in subs)
    assert notes == [f"ada: folders more than {S.MAX_DEPTH} deep, not searched"]
