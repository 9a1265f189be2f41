"""The sandbox of `perflab grade` (perflab/classroom/sandbox.py), and the adversarial corpus: a class
written as determined learners would write it against the grader's design (hostile.py), graded
once, as a teacher grades it (`grade_folder`, sandboxed, two at a time), by the `hostile` fixture;
one test per class of attack reads its gradebook and what the run left.

| class (test)                                   | learners                                                      |
|------------------------------------------------|---------------------------------------------------------------|
| last round's (`..._changes_nothing`,           | tampering before the judge reads, poison that outlives the    |
|   `last_rounds_forgeries_...`): tampering,     | learner, /proc, a daemon's socket, double forks, the audit    |
|   poison, reading the grader, left-behind      | hook's gaps (dir_fd, torch.from_file, subprocess.sys), links, |
|   processes, around the audit hook             | huge notebooks, the judge's lab-07 corpus (judge_0..5)        |
| printed output (`..._as_text`)                 | a formula in a cell, escape sequences                         |
| numbers measured where the learner runs        | ring_through_c10d (and its counters rewritten),               |
|   (`..._are_never_the_grade`)                  | ring_from_perflab, ring_forges_its_report (lab 06);           |
|                                                | graph_hides_its_breaks, graph_differs_when_traced (lab 10);   |
|                                                | child_computes_the_answer (lab 12)                            |
| lab 06's judge acts on what ranks write        | ring_acts_on_the_judge: pids to kill, the environment,        |
|                                                | megabytes of output, 16 GiB of memory                         |
| files the grader reads (links, no cap)         | links_its_files (kernel), worker_links_its_log (worker)       |
| one learner stops the class                    | deep_in_its_box, deep_in_the_worker, bomb (4 MiB of `{}`)     |
| limits that are not limits                     | children_share_memory, forks_without_end, fills_tmp_and_disk  |
| the teacher's secrets                          | reads_secrets_and_the_view (DATABASE_URL, PIP_INDEX_URL,      |
|                                                | HTTPS_PROXY with user:pass@, MYSQL_PWD; the keyrings)         |
| what the sandbox leaves in view                | reads_secrets_and_the_view (another copy of the course, the   |
|                                                | system's and the teacher's files), reads_the_other_copy       |
| names                                          | `ada` and `ada` + a zero-width space                          |
| honest controls (`the_honest_learners_...`)    | ada, stan, tom (07), lin, sam (15), ring_honest (06),         |
|                                                | bubble_honest (12)                                            |

The judge-side back doors of perflab's own answers (labs 01, 06, 12, 14, 15) and lab 11's predictions
written after the fact go through the judge alone, its workers confined the same way."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from perflab.classroom import evidence, judge, sandbox
from perflab.classroom import gradebook as gb

from . import hostile as H

ROOT = Path(__file__).resolve().parents[3]
LABS = ROOT / "labs"
NOT_DONE = ("wrong", "not done", "error", "timeout")
BOX = sandbox.find()
needs_sandbox = pytest.mark.skipif(BOX is None, reason=f"no sandbox here: {sandbox.unavailable()}")


# ----------------------------------------------------------------------------- the command
def _pairs(cmd: list[str]) -> list[tuple[str, str]]:
    return list(zip(cmd, cmd[1:]))


def _bound(cmd: list[str]) -> list[str]:
    """What the command binds into the sandbox (read-only or not)."""
    return [b for a, b in _pairs(cmd) if a in ("--ro-bind", "--bind")]


def test_the_command_binds_only_what_the_code_needs(tmp_path):
    box = sandbox.Sandbox("/usr/bin/bwrap")
    checkout = Path(__import__("perflab").__file__).resolve().parents[1]
    cmd = box.command(["python", "x.py"], writable=[tmp_path], hidden=[checkout, checkout / "labs", "/", tmp_path],
                      cwd=tmp_path, tmp_bytes=2**20)
    assert cmd[0] == "/usr/bin/bwrap" and ("--ro-bind", "/", "/") not in list(zip(cmd, cmd[1:], cmd[2:]))
    for flag in ("--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session"):
        assert flag in cmd
    pairs, bound = _pairs(cmd), _bound(cmd)
    assert str(checkout) not in bound and str(checkout / "labs") not in bound  # the checkout never in view
    assert str(checkout / "perflab") in bound and ("--bind", str(tmp_path)) in pairs  # perflab, and its own folder
    assert ("--size", str(2**20)) in pairs and ("--tmpfs", "/tmp") in pairs and ("--chdir", str(tmp_path)) in pairs
    assert not any(b == "/etc" or b.startswith(("/home", "/root/.ssh", "/var")) for b in bound), bound
    assert "/etc/shadow" not in bound and "/etc/ld.so.cache" in bound or not Path("/etc/ld.so.cache").exists()
    assert cmd[-3:] == ["--", "python", "x.py"]
    ranks = box.command(["python", "rank.py"], readable=[__file__], perflab=False)
    assert str(checkout / "perflab") not in _bound(ranks) and __file__ in _bound(ranks)


def test_a_virtual_environment_inside_the_checkout_is_bound_alone(monkeypatch, tmp_path):
    """A venv of copied binaries (`python -m venv --copies .venv`) in the checkout: the environment
    alone is bound, never the checkout around it (its `.git` holds the solutions)."""
    checkout = Path(__import__("perflab").__file__).resolve().parents[1]
    venv = checkout / ".venv"
    monkeypatch.setattr(sandbox.sys, "executable", str(venv / "bin" / "python"))
    monkeypatch.setattr(sandbox.sys, "prefix", str(venv))
    monkeypatch.setattr(sandbox.sys, "_base_executable", "/usr/bin/python3", raising=False)
    monkeypatch.setattr(sandbox.sys, "base_prefix", "/usr")
    bound = _bound(sandbox.Sandbox("bwrap").command(["true"], hidden=[checkout]))
    assert str(checkout) not in bound and (str(venv) in bound or not venv.exists())


def test_the_environment_is_put_back_also_from_a_python_started_with_dash_S(monkeypatch, tmp_path):
    """The judge runs `python -I -S`: its sys.prefix is the base install's, not the venv's; the venv
    (where torch lies) is still bound for the worker it confines."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    monkeypatch.setattr(sandbox.sys, "executable", str(venv / "bin" / "python"))
    monkeypatch.setattr(sandbox.sys, "prefix", "/usr")
    assert venv in sandbox.needed()


def test_a_learners_environment_comes_from_an_allowlist():
    base = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", **H.SECRETS, "AWS_PROFILE": "x", "HOME": "/root"}
    env = sandbox.learner_env(base, HOME="/box/home")
    assert env == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "HOME": "/box/home"}


def test_without_bwrap_there_is_no_sandbox_and_the_reason_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    sandbox.unavailable.cache_clear()
    sandbox.find.cache_clear()
    try:
        assert sandbox.find() is None
        assert "apt-get install bubblewrap" in sandbox.unavailable()
    finally:
        sandbox.unavailable.cache_clear()
        sandbox.find.cache_clear()


def test_gradebook_cells_that_a_spreadsheet_would_run_are_quoted_and_text_is_cleaned():
    assert gb.spreadsheet_safe("=1+1") == "'=1+1"
    assert gb.spreadsheet_safe("+cmd") == "'+cmd" and gb.spreadsheet_safe("@SUM(A1)") == "'@SUM(A1)"
    assert gb.spreadsheet_safe("\t=1") == "'=1" and gb.spreadsheet_safe(3.5) == 3.5
    assert gb.clean("red \x1b[31mtext\x1b[0m\x07 \x1b]0;title\x07end") == "red text end"


def test_what_a_sandbox_left_is_read_only_as_a_bounded_regular_file(tmp_path):
    """The executed notebook and the predictions lie in folders the learner's sandbox writes:
    replaced by a link (to a file of the grader's view) or a FIFO, they are not read."""
    (tmp_path / "secret").write_text("the grader's")
    (tmp_path / "executed.ipynb").symlink_to(tmp_path / "secret")
    os.mkfifo(tmp_path / "runner.log")  # would block a reader forever
    (tmp_path / "predictions.jsonl").write_text("x" * 100 + "\nlast")
    assert evidence.read_left(tmp_path / "executed.ipynb", 100) is None
    assert evidence.read_left(tmp_path / "runner.log", 100) is None and evidence.last_line(tmp_path / "runner.log") == "no output"
    assert evidence.read_left(tmp_path / "predictions.jsonl", 5) == b"\nlast"
    assert evidence.read_left(tmp_path / "missing", 5) is None


@needs_sandbox
def test_a_confined_process_sees_no_course_no_other_process_and_writes_nothing_outside(tmp_path):
    assert BOX is not None  # needs_sandbox
    own = tmp_path / "own"
    own.mkdir()
    probe = ("import os, sys\n"
             f"print(sorted(os.listdir({str(ROOT)!r})), len([p for p in os.listdir('/proc') if p.isdigit()]))\n"
             f"open({str(own / 'ok')!r}, 'w').write('1')\n"
             "try:\n    open(os.path.join(sys.prefix, 'poison.pth'), 'w')\nexcept OSError as e:\n    print(e.errno)\n")
    cmd = BOX.command([sys.executable, "-c", probe], writable=[own], hidden=[ROOT, ROOT / "labs", ROOT / "tests"])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    listing, procs, errno = out.stdout.rsplit("]", 1)[0] + "]", *out.stdout.rsplit("]", 1)[1].split()
    seen = eval(listing)  # noqa: S307 - the probe's own printed list
    assert "labs" not in seen and "tests" not in seen and ".git" not in seen and "perflab" in seen, out
    assert int(procs) <= 3 and int(errno) == 30, out  # its own processes only; EROFS
    assert (own / "ok").read_text() == "1" and not (Path(sys.prefix) / "poison.pth").exists()


# ----------------------------------------------------------------------------- the corpus: a class
def environment_state() -> dict[str, tuple[int, int]]:
    """What a learner could poison: site-packages' entries, and the checkout's files (perflab, labs,
    tests). Bytecode is compared apart (`bytecode_state`): other test workers may write it meanwhile."""
    out = {}
    purelib = Path(sysconfig.get_paths()["purelib"])
    for p in purelib.iterdir():
        out[str(p)] = (0, 0)
    for top in ("perflab", "labs", "tests"):
        for p in (ROOT / top).rglob("*"):
            if p.is_file() and "__pycache__" not in p.parts and ".pytest_cache" not in p.parts:
                st = p.stat()
                out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


def bytecode_state() -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in (ROOT / "perflab").rglob("__pycache__/*.pyc")}


def bytecode_untouched(before: dict[str, bytes]) -> list[str]:
    """The bytecode files changed since `before`, or new ones that Python did not write (no magic number)."""
    from importlib.util import MAGIC_NUMBER

    return [p for p, data in bytecode_state().items()
            if (p in before and before[p] != data) or (p not in before and not data.startswith(MAGIC_NUMBER))]


def tree_state(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def left_behind(since: float, marker: str, learners, settle_s: float = 15.0) -> list[str]:
    """Processes of this run still alive `settle_s` after grading returned (polled: a sandbox killed as the
    grading ended may take a moment to exit on a busy machine): started since `since`, by one of
    `learners` (their PERFLAB_LEARNER; other test workers may be grading classes of their own meanwhile)
    or naming `marker`."""
    deadline = time.monotonic() + settle_s
    while True:
        out = _alive_since(since, marker, learners)
        if not out or time.monotonic() > deadline:
            return out
        time.sleep(0.2)


def _alive_since(since: float, marker: str, learners) -> list[str]:
    import psutil

    out = []
    for p in psutil.process_iter(["pid", "create_time", "cmdline"]):
        try:
            if p.info["create_time"] < since - 1 or p.pid == os.getpid():
                continue
            env = p.environ()
            if env.get("PERFLAB_LEARNER") in learners or marker in " ".join(p.info["cmdline"] or []):
                out.append(f"{p.pid} {' '.join(p.info['cmdline'] or [])[:80]}")
        except psutil.Error:
            continue
    return out


TIMEOUT = 120  # lab 15's solution plans its step under torch's trackers in the kernel, on a busy machine
MEMORY = 3 * 2**30


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """The corpus graded once: the gradebook, and what the run left (see the module's docstring)."""
    import socket

    if BOX is None:
        pytest.skip(f"no sandbox here: {sandbox.unavailable()}")
    tmp = tmp_path_factory.mktemp("hostile")
    daemon_path = Path("/run") / f"perflab-corpus-{os.getpid()}.sock"  # a system daemon's socket, as docker's is
    sleeper = subprocess.Popen(["sleep", "900"])  # a process of the grader's that a learner names to the judge
    course, subs, classes = H.class_of(tmp, daemon_path, sleeper.pid)
    daemon_socket = socket.socket(socket.AF_UNIX)
    daemon_socket.bind(str(daemon_path))
    daemon_socket.listen()
    daemon_socket.setblocking(False)
    env_before, pyc_before, subs_before = environment_state(), bytecode_state(), tree_state(subs)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.time()
    try:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in H.SECRETS.items():
                mp.setenv(k, v)
            book = gb.grade_folder(subs, course=course, labs=["06", "07", "10", "12", "15"], timeout=TIMEOUT, jobs=2,
                                   limits=gb.Limits(memory_bytes=MEMORY), secret="corpus")
        seconds = time.time() - t0
        try:  # a connection made during the run waits in the socket's backlog (and a process left to make one later
            daemon_socket.accept()  # is what `left` finds)
            reached = True
        except BlockingIOError:
            reached = False
        yield SimpleNamespace(
            book=book, got={r.learner: r for r in book.records}, classes=classes, subs=subs, course=course, tmp=tmp,
            t0=t0, seconds=seconds, reached_daemon=reached, sleeper_alive=sleeper.poll() is None,
            rss_growth=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before,
            env_before=env_before, env_after=environment_state(), pyc_changed=bytecode_untouched(pyc_before),
            subs_before=subs_before, subs_after=tree_state(subs),
            left=left_behind(t0, str(tmp), set(classes)))
    finally:
        daemon_socket.close()
        daemon_path.unlink(missing_ok=True)
        sleeper.kill()
        sleeper.wait()
        import shutil

        shutil.rmtree(H.OTHER_COPY.parents[2], ignore_errors=True)


pytestmark_hostile = [needs_sandbox, pytest.mark.slow, pytest.mark.xdist_group("hostile-class")]


def hostile_test(fn):
    for mark in reversed(pytestmark_hostile):
        fn = mark(fn)
    return fn


@hostile_test
def test_a_hostile_class_is_graded_in_the_sandbox_and_changes_nothing(hostile):
    """What the run leaves: no learner reached the daemon's socket, no process left, nothing new in
    the environment, no bytecode changed, the submissions as handed in; every learner a record."""
    book = hostile.book
    assert not hostile.reached_daemon  # no learner reached the daemon's socket
    assert not hostile.left, hostile.left
    assert book.isolated and book.grouped, book.limits
    forgeries = [w for w, c in hostile.classes.items() if c != "honest"]
    for who in forgeries:
        assert who.replace("\u200b", "\\u200b") in hostile.got, (who, book.notes)
    assert len(forgeries) >= 36 + 18  # last round's 36 (and 9 judge-side below), this round's 18
    # nothing outside the run's folders changed, nothing new in the environment, the submissions as handed in
    assert sorted(set(hostile.env_after) ^ set(hostile.env_before)) == []
    assert hostile.env_after == hostile.env_before
    assert hostile.pyc_changed == []
    assert hostile.subs_after == hostile.subs_before


@hostile_test
def test_last_rounds_forgeries_are_never_done_and_the_refusals_say_why(hostile):
    """Last round's corpus (tampering, poison, reading the grader, left-behind processes, around the
    audit hook, links, huge notebooks, the judge's lab-07 corpus): anything but done, with a reason."""
    got, book = hostile.got, hostile.book
    assert "s3cr3t" not in book.csv_text() and "token none" in got["reads_the_teachers_token"].message
    for who in (w for w, c in hostile.classes.items() if c == "last round"):
        assert got[who].outcome in NOT_DONE and got[who].message, (who, got[who].outcome, got[who].message)
    assert "symbolic link" in got["links"].message and "symbolic link" in got["borrows"].message
    assert "MiB" in got["huge"].message and "cells" in got["cells"].message
    assert got["forges_predictions"].predictions == []  # lab 07 asks for none


@hostile_test
def test_the_honest_learners_are_graded_as_when_graded_without_the_hostile_class(hostile, tmp_path):
    """ada, stan and tom (07), lin and sam (15): the class's verdicts, and for lab 07 the same outcome and
    message as a grading of the three alone, away from every attacker."""
    got = hostile.got
    alone_dir = tmp_path / "alone"
    for who in ("ada", "stan", "tom"):
        (alone_dir / who).mkdir(parents=True)
        (alone_dir / who / "07_shuffle.ipynb").write_bytes((hostile.subs / who / "07_shuffle.ipynb").read_bytes())
    alone = gb.grade_folder(alone_dir, course=hostile.course, labs=["07"], timeout=TIMEOUT, jobs=2,
                            limits=gb.Limits(memory_bytes=MEMORY), secret="corpus")
    for rec in alone.records:
        assert (got[rec.learner].outcome, got[rec.learner].message) == (rec.outcome, rec.message), rec.learner
    assert sorted(r.learner for r in alone.records) == ["ada", "stan", "tom"]
    assert got["ada"].outcome == "done" and got["tom"].outcome == "done" and got["stan"].outcome == "not done"
    assert got["lin"].outcome == "done", got["lin"].message  # lab 15: its solution, then its stub
    assert got["sam"].outcome == "not done" and "recompute policy" in got["sam"].message, got["sam"].message


@hostile_test
def test_what_a_learner_prints_reaches_the_teacher_as_text(hostile):
    """A formula is text in the CSV; escape sequences are gone from what is printed."""
    book = hostile.book
    assert "\n'=1+1," in book.csv_text()
    text = book.summary()
    assert "\x1b" not in text and "\x07" not in text and "cleared your screen" in text


@hostile_test
def test_numbers_measured_where_the_learner_runs_are_never_the_grade(hostile):
    """Lab 06's ranks talk only through the judge, which counts what each sends and sums what each
    was given (a collective called through `distributed_c10d`, perflab's own ring, a forged report:
    none is done); lab 10's traced graph runs where no learner code ever ran (a patched tracer, a
    forward that differs when traced: wrong); lab 12's child process cannot start."""
    got = hostile.got
    assert got["ring_honest"].outcome == "done", got["ring_honest"].message
    assert got["bubble_honest"].outcome == "done", got["bubble_honest"].message
    for who in ("ring_through_c10d", "ring_from_perflab", "ring_forges_its_report"):
        assert got[who].outcome == "wrong" and "ring_all_reduce on 2 ranks" in got[who].message, (who, got[who].message)
    assert "did not finish" in got["ring_from_perflab"].message  # perflab is not in a rank's view
    assert got["graph_hides_its_breaks"].outcome == "wrong" and "one graph" in got["graph_hides_its_breaks"].message
    assert got["graph_differs_when_traced"].outcome == "wrong", got["graph_differs_when_traced"].message
    assert "compiled logits differ" in got["graph_differs_when_traced"].message
    assert got["child_computes_the_answer"].outcome == "error", got["child_computes_the_answer"].message
    assert "Operation not permitted" in got["child_computes_the_answer"].message


@hostile_test
def test_lab_06s_judge_acts_only_on_what_it_started(hostile):
    """Ranks that name a process of the grader's where the judge used to read pids to kill, print
    megabytes and ask for 16 GiB: the named process lives, the ranks are stopped by their limits, and
    the environment a rank reports holds none of the teacher's."""
    rec = hostile.got["ring_acts_on_the_judge"]
    assert hostile.sleeper_alive
    assert rec.outcome == "wrong" and "rank 0 ValueError: env " in rec.message and "PATH=" in rec.message, rec.message
    assert not any(v in rec.message for v in H.SECRETS.values())
    assert hostile.rss_growth < 512 * 2**10, hostile.rss_growth  # kB: the grader read none of it whole


@hostile_test
def test_what_the_grader_reads_from_a_box_is_never_followed_and_bounded(hostile):
    """The executed notebook and the predictions linked to a library and /dev/zero, the worker's log
    linked to /dev/zero and 16 MiB written to it: each learner's record says what went wrong, and
    the grader's memory did not grow by what was there."""
    got = hostile.got
    assert got["links_its_files"].outcome == "error" and got["links_its_files"].predictions == []
    assert got["worker_links_its_log"].outcome == "error"
    assert "exit status 3" in got["worker_links_its_log"].message, got["worker_links_its_log"].message
    assert hostile.rss_growth < 512 * 2**10, hostile.rss_growth


@hostile_test
def test_one_learner_never_stops_the_class(hostile):
    """1,500-deep folders in the kernel's box and in the worker's, a notebook of 4 MiB of empty
    dicts: each is that learner's record, the box is gone, and every other learner was graded."""
    got = hostile.got
    box = got["deep_in_its_box"].message.rsplit(" ", 1)[-1]
    assert got["deep_in_its_box"].outcome == "error" and box.startswith("/") and not Path(box).exists(), box
    assert got["deep_in_the_worker"].outcome == "wrong", got["deep_in_the_worker"].message
    assert got["bomb"].outcome in NOT_DONE and got["bomb"].message
    assert len(hostile.book.records) == len(hostile.classes)  # a record for every learner, the class's gradebook
    assert hostile.rss_growth < 512 * 2**10, hostile.rss_growth


@hostile_test
def test_the_limits_hold_for_all_of_a_learners_processes_together(hostile):
    """Five children of 700 MiB each (3.5 GiB, each under the per-process limit), a fork bomb as
    root, and /tmp, /dev/shm and the learner's folder written until they are full."""
    got = hostile.got
    import ast
    import re

    def number(who: str, pattern: str) -> int:
        m = re.search(pattern, got[who].message)
        assert m, got[who].message
        return int(m.group(1))

    assert number("children_share_memory", r"children held (\d+)") * 700 * 2**20 <= MEMORY
    limits = gb.Limits()
    assert limits.processes and limits.tmp_bytes and limits.disk_bytes
    assert number("forks_without_end", r"forked (\d+)") < limits.processes, got["forks_without_end"].message
    wrote = ast.literal_eval(got["fills_tmp_and_disk"].message.split("wrote MiB ", 1)[1])  # the learner's own dict
    assert wrote["/tmp"] <= limits.tmp_bytes // 2**20 and wrote["/dev/shm"] <= limits.tmp_bytes // 2**20, wrote
    assert wrote["."] <= limits.disk_bytes // 2**20, wrote
    assert "cgroup" in hostile.book.limits


@hostile_test
def test_no_secret_of_the_teacher_reaches_a_learner(hostile):
    """The environment a learner sees is an allowlist (a database URL, a package index's, a proxy
    with user:pass@, MYSQL_PWD: none reaches it), and every keyring call is refused (nothing read,
    no key left behind)."""
    rec = hostile.got["reads_secrets_and_the_view"]
    assert rec.outcome == "error" and " env " in rec.message, rec.message
    assert not any(v in rec.message for v in H.SECRETS.values()), rec.message
    assert not any(v in hostile.book.csv_text() for v in H.SECRETS.values())
    assert rec.message.count("errno 1") == 3, rec.message  # keyctl, then add_key to the session's and the user's


@hostile_test
def test_a_learner_sees_only_what_its_code_needs(hostile):
    """Another copy of the course in the teacher's home, /etc/shadow, the teacher's home, the
    checkout's .git and solutions, /home and /var: none is in view, and an answer read from the copy
    is not done."""
    seen = hostile.got["reads_secrets_and_the_view"].message.split(" env ")[0]
    assert "=True" not in seen and seen.count("=False") == 7, seen
    assert hostile.got["reads_the_other_copy"].outcome in NOT_DONE, hostile.got["reads_the_other_copy"].message


@hostile_test
def test_names_that_differ_show_differently(hostile):
    """`ada` and `ada` with a zero-width space are two learners, two rows, the second shown escaped."""
    rows = [r for r in hostile.book.records if r.learner.startswith("ada")]
    assert sorted(r.learner for r in rows) == ["ada", "ada\\u200b"]
    assert all(r.outcome == "done" for r in rows)
    assert "ada\\u200b" in hostile.book.csv_text() and "\u200b" not in hostile.book.csv_text()


# ----------------------------------------------------------------------------- the corpus: perflab's answers
def shipped(lab: str) -> dict:
    return json.loads((LABS / f"{lab}.ipynb").read_text())


def forged(lab: str, *cells: str) -> dict:
    nb = shipped(lab)
    nb["cells"] += [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
                    for c in cells]
    return nb


def confined_verdict(lab: str, nb: dict) -> tuple[str, str]:
    return judge.verdict(nb, shipped(lab), learner="mallory", secret="corpus", course_dirs=[str(LABS)],
                         memory_bytes=4 * 2**30, cpu_s=120, sandbox=BOX,
                         hidden=[str(p) for p in gb.hidden_from_learners(LABS, {})])


# lab 15: each forgery answers one question honestly and takes the other from what perflab or torch computes
LAB15_OPT = "def optimizer_bytes(params, gpus, fsdp):\n    return 8 * params / (gpus if fsdp else 1)\n"
LAB15_POLICY = ("def recompute_policy(ops, need_bytes, n_blocks):\n"
                "    order = sorted(ops, key=lambda o: o.bytes_per_block / o.seconds_per_block, reverse=True)\n"
                "    out, freed = [], 0\n    for o in order:\n        if freed >= need_bytes:\n            break\n"
                "        out.append(o.name)\n        freed += o.bytes_per_block * n_blocks\n    return out\n")
LAB15_BACK_DOORS = [
    ("15_at_scale", "optimizer_bytes as half of lab 12's model-state bytes",
     [LAB15_POLICY + "from perflab.shard import lab12 as l12\n\ndef optimizer_bytes(params, gpus, fsdp):\n"
      "    return l12.reference_fsdp_bytes(params, gpus if fsdp else 1) / 2\n"]),
    ("15_at_scale", "optimizer_bytes from the memory lesson's bytes per parameter",
     [LAB15_POLICY + "from perflab.memory.estimate import bytes_per_param\n\ndef optimizer_bytes(params, gpus, fsdp):\n"
      "    return bytes_per_param('fp32', 'adamw')['optimizer_states'] * params / (gpus if fsdp else 1)\n"]),
    ("15_at_scale", "recompute_policy from the planner's own choice",
     [LAB15_OPT + "from perflab.plan import recompute\n\ndef recompute_policy(ops, need_bytes, n_blocks):\n"
      "    order = sorted(ops, key=lambda o: o.bytes_per_second, reverse=True)\n"
      "    return [o.name for o in recompute.choose(order, need_bytes, n_blocks)]\n"]),
    ("15_at_scale", "recompute_policy from torch's SAC estimator's greedy order",
     [LAB15_OPT + "from torch.distributed._tools.sac_estimator import SACEstimator, SACStats\n\n"
      "def recompute_policy(ops, need_bytes, n_blocks):\n"
      "    stats = SACStats([o.name for o in ops], [o.seconds_per_block for o in ops], [o.bytes_per_block for o in ops],\n"
      "                     [], [], list(range(len(ops))), [], False)\n"
      "    out, freed = [], 0\n"
      "    for m in SACEstimator()._get_greedy_order_meta(stats).msps_meta:\n"
      "        if freed >= need_bytes:\n            break\n"
      "        out.append(ops[m.op_idx].name)\n        freed += m.memory * n_blocks\n    return out\n"]),
]

BACK_DOORS = [
    ("06_ring_allreduce", "perflab's own ring, renamed",
     ["from perflab.distributed import collectives\n\n"
      "def ring_all_reduce(x, rank, world_size, group=None):\n"
      "    return collectives.ring_all_reduce(x, rank, world_size, group)"]),
    ("12_sharding", "the step formula from lab.RATIO_MISTAKES' lambdas",
     ["bubble = lab.RATIO_MISTAKES['(p−1)/(m+p−1)'][0]\ndenominator = 'step'"]),
    ("12_sharding", "fsdp_bytes from the memory lesson's model_state_bytes",
     ["from perflab.memory import estimate\n\ndef fsdp_bytes(params, nproc):\n"
      "    return estimate.model_state_bytes(params) / nproc"]),
    ("01_flops", "torch's FlopCounterMode counts the answer",
     ["import torch\nfrom torch.utils.flop_counter import FlopCounterMode\n\n"
      "def mlp_forward_flops(batch, d_in, d_hidden, d_out):\n"
      "    m = torch.nn.Sequential(torch.nn.Linear(d_in, d_hidden), torch.nn.ReLU(), torch.nn.Linear(d_hidden, d_out))\n"
      "    with FlopCounterMode(display=False) as c:\n        m(torch.zeros(batch, d_in))\n"
      "    return c.get_total_flops()"]),
    ("14_regression_hunt", "a brute force over synthetic_evidence",
     ["import itertools\nfrom perflab.hunt import report\nfrom perflab.hunt.pool import NAMES\n\n"
      "def read_evidence(evidence):\n    sig = report.load_signatures()\n"
      "    for k in range(0, 3):\n        for combo in itertools.combinations(NAMES, k):\n"
      "            if report.synthetic_evidence(list(combo), sig) == evidence:\n                return list(combo)\n"
      "    return []"]),
    *LAB15_BACK_DOORS,
]


@needs_sandbox
@pytest.mark.parametrize("lab,what,cells", BACK_DOORS, ids=[w for _, w, _ in BACK_DOORS])
def test_perflabs_own_answers_are_out_of_reach(lab, what, cells):
    if not (LABS / f"{lab}.ipynb").is_file():
        pytest.skip(f"no lab {lab} in this course")
    outcome, message = confined_verdict(lab, forged(lab, *cells))
    assert outcome in NOT_DONE and message, (what, outcome, message)


def test_lab_15s_back_doors_would_be_done_were_they_not_closed():
    """Each of lab 15's forgeries answers rightly when nothing is disarmed: closing them is what the
    sandboxed corpus tests."""
    import random

    from perflab.grading import checks as grading
    from perflab.plan import lab15

    for _, what, (cell,) in LAB15_BACK_DOORS:
        grading.reset()
        ns: dict = {}
        exec(cell, ns)  # noqa: S102 - the forgery's own cell
        assert lab15.check_optimizer_bytes(ns["optimizer_bytes"]) and lab15.check_recompute_policy(ns["recompute_policy"])
        lab15.judge(ns, random.Random(0))
        assert set(grading._RESULTS.values()) == {"passed"}, (what, grading._RESULTS)


@needs_sandbox
def test_lab_12s_conventions_are_accepted_in_any_case_by_the_judge_as_by_the_check():
    nb = json.loads((LABS / "solutions" / "12_sharding.ipynb").read_text())
    nb["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                        "source": "denominator = 'Step'\n\ndef bubble(p, m):\n    return (p - 1) / (m + p - 1)"})
    assert confined_verdict("12_sharding", nb)[0] == "done"


def after_the_fact(alias: str) -> dict:
    """Lab 11's solution with its predictions taken out of the plan's cell and written again below the
    cell that measured the plan, that cell calling the measurement through `alias` (a name that is
    not `run_ladder`)."""
    nb = json.loads((LABS / "solutions" / "11_capstone.ipynb").read_text())
    cells = nb["cells"]
    at = next(i for i, c in enumerate(cells) if "my_predictions = " in "".join(c["source"]))
    src = "".join(cells[at]["source"]).splitlines()
    line = next(ln for ln in src if ln.startswith("my_predictions = "))
    cells[at]["source"] = "\n".join(ln for ln in src if ln != line)
    measured = next(i for i, c in enumerate(cells) if "runner.run_ladder(tp, plan" in "".join(c["source"]))
    cells[measured]["source"] = "".join(cells[measured]["source"]).replace("runner.run_ladder(tp, plan", "_measure(tp, plan")
    code = lambda s: {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": s}  # noqa: E731
    cells.insert(measured + 1, code(line))  # the predictions, once the plan is measured
    cells.insert(measured, code(alias))  # the measuring call, hidden behind another name
    return nb


@needs_sandbox
@pytest.mark.parametrize("alias", ["_measure = runner.run_ladder", "from perflab.tune.runner import run_ladder as _measure",
                                   "_measure = getattr(runner, 'run_' + 'ladder')",
                                   "_measure = runner.__dict__['run_' + 'ladder']"])
def test_lab_11s_predictions_written_after_the_measurement_are_wrong(alias):
    outcome, message = confined_verdict("11_capstone", after_the_fact(alias))
    assert outcome == "wrong" and "after the measurement" in message, (alias, outcome, message)


@pytest.mark.skipif(os.path.realpath("/tmp") != "/tmp", reason="/tmp is a link here (the paths below are /tmp's own)")
def test_an_environment_under_tmp_is_bound_over_the_private_tmp(monkeypatch, tmp_path):
    """A checkout cloned under /tmp (its venv and perflab there): the private /tmp covers it, so the
    environment and perflab are bound after it, or the confined Python cannot start."""
    venv, pkg = tmp_path / ".venv", tmp_path / "perflab"
    venv.mkdir()
    pkg.mkdir()
    monkeypatch.setattr(sandbox, "needed", lambda: [venv, pkg, Path("/usr")])
    cmd = sandbox.Sandbox("bwrap").command(["true"], hidden=[tmp_path])
    pairs = _pairs(cmd)
    assert ("--tmpfs", str(tmp_path)) not in pairs  # not in view anyway
    assert ("--ro-bind", str(venv)) in pairs and ("--ro-bind", str(pkg)) in pairs
    assert cmd.index("/tmp") < cmd.index(str(venv))  # bound after the private /tmp is mounted
