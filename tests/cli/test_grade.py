"""`perflab grade` finds every lab of the course, each with its check calls, and each lab notebook
imports its checks the same way (perflab/classroom/gradebook.py, perflab/classroom/judge.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from clirun import perflab

from perflab.classroom import gradebook as gb
from perflab.classroom import sandbox
from perflab.classroom.answer_source import lab_module_name

pytest.importorskip("papermill")


LABS = Path(__file__).resolve().parents[2] / "labs"


IMPORT = re.compile(r"^from perflab(?:\.\w+)+ import lab\w+ as lab$", re.M)


def test_grade_caps_jobs_reports_each_notebook_and_writes_csv(tmp_path):
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    (subs / "alice" / "01_flops.ipynb").write_text("not a notebook")
    csv = tmp_path / "book.csv"
    unconfined = [] if sandbox.find() else ["--no-sandbox"]  # CI (root on Linux) has bubblewrap
    r = perflab("grade", str(subs), "--labs", "01", "--jobs", "999", "--csv", str(csv), *unconfined)
    assert r.returncode == 0, r.stderr
    assert "999 jobs asked" in r.stderr and "alice · 01_flops: error" in r.stderr
    assert f"Gradebook written to {csv}" in r.stdout
    rows = csv.read_text().splitlines()
    assert len(rows) == 2 and "alice" in rows[1] and "error" in rows[1]


def test_bad_input_is_one_line(tmp_path, capsys):
    from perflab.cli import main

    assert main(["grade", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not a folder" in err
    assert main(["grade", str(tmp_path), "--labs", "42"]) == 2
    assert "no lab '42' in this course" in capsys.readouterr().err


def test_without_a_sandbox_grading_stops_in_one_line_unless_told_and_then_says_so(tmp_path, capsys, monkeypatch):
    from perflab.cli import main

    monkeypatch.setattr(sandbox, "find", lambda: None)
    monkeypatch.setattr(sandbox, "unavailable", lambda: "no bwrap on the PATH: install bubblewrap")
    (tmp_path / "alice").mkdir()
    assert main(["grade", str(tmp_path), "--labs", "07"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no bwrap on the PATH" in err and "--no-sandbox" in err
    assert main(["grade", str(tmp_path), "--labs", "07", "--no-sandbox", "--json"]) == 0
    book = json.loads(capsys.readouterr().out)
    assert book["isolated"] is False and "NOT ISOLATED" in book["warning"]


def test_every_lab_notebook_is_found_with_at_least_one_check():
    found = gb.course_labs(LABS)
    on_disk = sorted(p.stem for p in LABS.glob("*.ipynb"))
    assert sorted(lab.name for lab in found.values()) == on_disk  # 04b_tile_config included
    for lab in found.values():
        assert lab.checks, f"{lab.name}: no `lab.check_…(` call found"


def test_every_lab_imports_its_checks_as_lab_and_only_so():
    for path in sorted(LABS.glob("*.ipynb")) + sorted((LABS / "solutions").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
        assert len(IMPORT.findall(code)) == 1, path
        assert not re.search(r"\blab\d+\w*\.check_", code), f"{path}: calls its checks by the module's own name"
        assert lab_module_name(nb) is not None, path


def test_a_lab_with_a_letter_in_its_number_is_matched_to_itself(tmp_path):
    labs = {n: gb.Lab(n, f"{n}_{t}", tmp_path, ()) for n, t in (("04", "cliffs"), ("04b", "tile_config"))}
    assert gb.match_lab("04b_tile_config.ipynb", labs).number == "04b"
    assert gb.match_lab("alice_lab04b.ipynb", labs).number == "04b"
    assert gb.match_lab("04_cliffs.ipynb", labs).number == "04"
    assert gb.pick_labs(labs, ["04b"]) == {"04b": labs["04b"]}


def test_the_first_cell_of_every_lab_says_what_the_grade_comes_from():
    for path in sorted(LABS.glob("*.ipynb")):
        first = "".join(json.loads(path.read_text())["cells"][0]["source"])
        assert "perflab grade" in first and "tutor" in first, path.name


def test_a_plain_kill_ends_the_grading_as_ctrl_c_does_so_its_cleanup_runs(tmp_path):
    """SIGTERM becomes KeyboardInterrupt in `perflab grade`, so the `finally` that unmounts the learners'
    boxes and removes their groups runs, and the command says `interrupted` (perflab/cli.py)."""
    import subprocess
    import sys

    marker = tmp_path / "cleaned"
    code = ("import os, signal\n"
            "from perflab.commands.grade import stop_on_sigterm\n"
            "stop_on_sigterm()\n"
            "try:\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    signal.pause()\n"
            "except KeyboardInterrupt:\n"
            f"    open({str(marker)!r}, 'w').write('yes')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert marker.read_text() == "yes"
