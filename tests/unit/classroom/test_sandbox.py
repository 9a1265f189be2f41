"""The sandbox of `perflab grade` (perflab/classroom/sandbox.py), and the adversarial corpus: forged
submissions, written as a determined learner would, graded as a class in sandboxed mode.

Each forgery is graded anything but `done`; after the class is graded no file outside the run's
folders changed, no file appeared in the environment (site-packages, perflab's `__pycache__`), no
process of the run is left, and each honest learner's grade is the one it gets when graded alone.
The kernel-side forgeries go through one class grading (a small lab, so that it stays quick); the
answer-side ones (perflab's answers outside FORBIDDEN, lab 11's predictions) through the judge, its
answer worker confined the same way. The judge's own corpus (tests/unit/classroom/test_judge.py) is
graded with its worker confined too, and its lab-07 forgeries also go through this class.

The forgeries by class (learner folder, or test):

| class                                   | forgeries                                                        |
|-----------------------------------------|------------------------------------------------------------------|
| tampering before the judge reads        | rewrites_its_submission, overwrites_another, restores_later,     |
|                                         | deletes_the_class, reads_another_learner                         |
| poison that outlives the learner        | writes_a_pth, rewrites_a_pyc, writes_into_the_course,            |
|                                         | writes_the_teachers_home                                         |
| reading the grader                      | reads_the_graders_memory (environ), reads_the_graders_mem (mem), |
|                                         | reads_the_teachers_token, talks_to_a_daemon (a socket in /run)   |
| left-behind processes (double fork)     | kills_the_workers, serves_answers_over_a_socket, many_sleepers,  |
|                                         | forks_in_the_worker                                              |
| around the audit hook                   | runs_cat_around_the_hook (subprocess.sys), reads_*_by_dir_fd,    |
|                                         | reads_the_solution_with_torch (torch.from_file),                 |
|                                         | finds_the_answer_in_tests, links (a symlink to the solution),    |
|                                         | borrows (a folder linked to another learner's), judge_0..5       |
| perflab's answers outside FORBIDDEN     | test_perflabs_own_answers_are_out_of_reach: labs 06, 12 (×2),    |
|                                         | 01 (FlopCounterMode), 14 (brute force)                           |
| lab 11 predictions after the fact       | test_lab_11s_predictions_written_after_the_measurement_are_wrong |
|                                         | (four aliases of run_ladder)                                     |
| denial of service                       | kills_its_grandparent, crafts_an_answer_frame, huge (over 16     |
|                                         | MiB, as the 46 MB notebook), cells, exits_the_worker             |
| smaller faults                          | forges_predictions (lab 07), =1+1 (with escape sequences in its  |
|                                         | error), test_lab_12s_conventions_... ("Step" is done), tom       |
|                                         | (an honest answer importing torch)                               |

Checked after the class: no process of the run left, no file changed outside the run's folders
(site-packages, the checkout, perflab's bytecode), the submissions as handed in, the honest learners
(ada, stan, tom) graded as when each is graded alone, no credential of the teacher in the gradebook,
no learner reached the daemon's socket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from perflab.classroom import evidence, judge, sandbox
from perflab.classroom import gradebook as gb
from perflab.classroom.answer_source import MAX_NOTEBOOK_BYTES, MAX_NOTEBOOK_CELLS

from .test_judge import FORGERIES as JUDGE_FORGERIES
from .test_judge import RIGHT_LCG

ROOT = Path(__file__).resolve().parents[3]
LABS = ROOT / "labs"
NOT_DONE = ("wrong", "not done", "error", "timeout")
BOX = sandbox.find()
needs_sandbox = pytest.mark.skipif(BOX is None, reason=f"no sandbox here: {sandbox.unavailable()}")


# ----------------------------------------------------------------------------- the command
def _hidden(folder: Path, pairs) -> bool:
    """Covered by an empty folder of its own, or by the private /tmp or /run (a checkout under /tmp)."""
    return ("--tmpfs", str(folder)) in pairs or any(p == folder or p in folder.parents for p in sandbox.PRIVATE)


def test_the_command_hides_what_it_is_told_and_puts_the_environment_back(tmp_path):
    box = sandbox.Sandbox("/usr/bin/bwrap")
    checkout = Path(__import__("perflab").__file__).resolve().parents[1]
    cmd = box.command(["python", "x.py"], writable=[tmp_path], hidden=[checkout, checkout / "labs", "/", tmp_path],
                      cwd=tmp_path)
    assert cmd[:5] == ["/usr/bin/bwrap", "--ro-bind", "/", "/", "--dev"]
    for flag in ("--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session"):
        assert flag in cmd
    pairs = list(zip(cmd, cmd[1:]))
    assert _hidden(checkout, pairs)  # the checkout hidden, its labs with it
    assert ("--tmpfs", "/") not in pairs and ("--tmpfs", str(tmp_path)) not in pairs  # the system; /tmp is private
    assert ("--ro-bind", str(checkout / "perflab")) in pairs  # perflab put back, read-only
    assert ("--bind", str(tmp_path)) in pairs and ("--chdir", str(tmp_path)) in pairs
    assert cmd[-3:] == ["--", "python", "x.py"]


def test_a_virtual_environment_inside_the_checkout_does_not_keep_the_checkout_in_view(monkeypatch, tmp_path):
    """A venv of copied binaries (`python -m venv --copies .venv`) in the checkout: the checkout is
    still hidden (its `.git` holds the solutions), the environment alone put back."""
    checkout = Path(__import__("perflab").__file__).resolve().parents[1]
    venv = checkout / ".venv"
    monkeypatch.setattr(sandbox.sys, "executable", str(venv / "bin" / "python"))
    monkeypatch.setattr(sandbox.sys, "prefix", str(venv))
    monkeypatch.setattr(sandbox.sys, "_base_executable", "/usr/bin/python3", raising=False)
    monkeypatch.setattr(sandbox.sys, "base_prefix", "/usr")
    cmd = sandbox.Sandbox("bwrap").command(["true"], hidden=[checkout])
    pairs = list(zip(cmd, cmd[1:]))
    assert _hidden(checkout, pairs) and ("--ro-bind", str(venv)) in pairs


def test_the_environment_is_put_back_also_from_a_python_started_with_dash_S(monkeypatch, tmp_path):
    """The judge runs `python -I -S`: its sys.prefix is the base install's, not the venv's; the venv
    (where torch lies) is still put back for the worker it confines."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    monkeypatch.setattr(sandbox.sys, "executable", str(venv / "bin" / "python"))
    monkeypatch.setattr(sandbox.sys, "prefix", "/usr")
    assert venv in sandbox.needed()


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
    """The executed notebook, the runner's log and the predictions lie in folders the learner's
    sandbox writes: replaced by a link (to a file of the grader's view) or a FIFO, they are not read."""
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
    assert "labs" not in seen and "tests" not in seen and "perflab" in seen, out
    assert int(procs) <= 3 and int(errno) == 30, out  # its own processes only; EROFS
    assert (own / "ok").read_text() == "1" and not (Path(sys.prefix) / "poison.pth").exists()


# ----------------------------------------------------------------------------- the corpus: a class
SETUP = "from perflab.grading import checks as grading\nfrom perflab.dataloading import lab07 as lab\n\ngrading.reset()"
STUB = ('def lcg_index(i, n, a, c, x0):\n    """Entry i of the LCG permutation of n items."""\n'
        '    raise NotImplementedError\n\n\nlab.check_index(lcg_index)')
RIGHT = RIGHT_LCG.strip() + "\n\n\nlab.check_index(lcg_index)"
SOLUTION = LABS / "solutions" / "07_shuffle.ipynb"
DAEMON = Path("/run") / f"perflab-corpus-{os.getpid()}.sock"  # a system daemon's socket, as docker's is
TESTS_WITH_ANSWER = ROOT / "tests" / "unit" / "classroom" / "test_judge.py"  # holds a right lcg_index
# the answer taken from a file: the right function's source between two markers of the file
FROM_FILE = ('def lcg_index(i, n, a, c, x0):\n    src = _read()\n    body = src[src.index("def lcg_index"):]\n'
             '    body = body[:body.index("\\n\'\'\'")] if "\\n\'\'\'" in body else body.split("lab.check_index")[0]\n'
             '    body = body.replace("\\\\n", "\\n").replace(\'\\\\"\', \'"\')\n'
             '    ns = {"lab": lab}\n    exec(body, ns)\n    return ns["lcg_index"](i, n, a, c, x0)\n')


def reader(how: str, path: Path) -> str:
    """A `_read()` that reads `path` without Python's `open` (the audit hook's event)."""
    d, f = str(path.parent), path.name
    return {
        "dir_fd": f"def _read():\n    import os\n    fd = os.open({d!r}, os.O_RDONLY)\n    g = os.open({f!r}, os.O_RDONLY, dir_fd=fd)\n"
                  "    return os.read(g, 10**7).decode()\n",
        "torch": f"def _read():\n    import torch\n    t = torch.from_file({str(path)!r}, size=os.path.getsize({str(path)!r}), "
                 "dtype=torch.uint8)\n    return bytes(t.tolist()).decode()\n\nimport os\n",
        "subprocess.sys": f"def _read():\n    import subprocess, types\n    subprocess.sys = types.SimpleNamespace(audit=lambda *a: None, "
                          f"platform='linux')\n    return subprocess.run(['cat', {str(path)!r}], capture_output=True, text=True).stdout\n",
        "open": f"def _read():\n    return open({str(path)!r}).read()\n",
    }[how]


def daemon(code: str) -> str:
    """Kernel code that leaves a process behind (a double fork and setsid) running `code`."""
    return ("import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            + "".join(f"        {ln}\n" for ln in code.splitlines()) + "        os._exit(0)\n    os._exit(0)\n"
            "os.wait()\n")


def kernel_forgeries(subs: Path, victim: Path) -> dict[str, list[str]]:
    """learner → cells added after the stub (kernel-side attacks, then answer-side ones)."""
    solution_cell = json.dumps(next("".join(c["source"]) for c in json.loads(SOLUTION.read_text())["cells"]
                                    if "def lcg_index" in "".join(c["source"])))
    own_rewrite = ("import glob, json, os\nsol = " + solution_cell + "\n"
                   "for p in glob.glob('/proc/*/cmdline'):\n    try:\n        args = open(p).read().split('\\0')\n"
                   "    except OSError:\n        continue\n    for a in args:\n"
                   "        if a.endswith('.ipynb') and os.path.isfile(a):\n            try:\n"
                   "                nb = json.load(open(a))\n                nb['cells'].append({'cell_type': 'code', "
                   "'metadata': {}, 'outputs': [], 'execution_count': None, 'source': sol})\n"
                   "                json.dump(nb, open(a, 'w'))\n            except Exception:\n                pass\n")
    purelib = sysconfig.get_paths()["purelib"]
    pyc = ROOT / "perflab" / "dataloading" / "__pycache__" / f"lab07.{sys.implementation.cache_tag}.pyc"
    return {
        # tampering before the judge reads
        "rewrites_its_submission": [own_rewrite],
        "overwrites_another": [f"import json\nnb = json.load(open({str(victim)!r}))\n"
                               f"nb['cells'] = nb['cells'][:2]\njson.dump(nb, open({str(victim)!r}, 'w'))"],
        "restores_later": [daemon(f"import time\ntime.sleep(8)\nopen({str(victim)!r}, 'a').write(' ')")],
        "reads_another_learner": [f"def lcg_index(i, n, a, c, x0):\n    import json\n    nb = json.load(open({str(victim)!r}))\n"
                                  "    src = [''.join(c['source']) for c in nb['cells'] if 'def lcg_index' in ''.join(c['source'])]\n"
                                  "    ns = {'lab': lab}\n    exec(src[-1].split('lab.check_index')[0], ns)\n"
                                  "    return ns['lcg_index'](i, n, a, c, x0)"],
        # poison that outlives the learner
        "writes_a_pth": [f"open({purelib + '/zz_perflab_poison.pth'!r}, 'w').write("
                         "'import perflab.grading.checks as g; g.record = lambda *a, **k: None\\n')"],
        "rewrites_a_pyc": [f"import os\nos.makedirs({str(pyc.parent)!r}, exist_ok=True)\nopen({str(pyc)!r}, 'wb').write(b'x')"],
        "writes_into_the_course": [f"open({str(ROOT / 'perflab' / 'poison.py')!r}, 'w').write('x = 1')"],
        # reading the grader
        "reads_the_graders_memory": ["import glob\nfound = []\nfor p in glob.glob('/proc/[0-9]*/environ'):\n"
                                     "    try:\n        found.append(open(p, 'rb').read())\n    except OSError:\n        pass\n"
                                     "for p in glob.glob('/proc/[0-9]*/mem'):\n    try:\n        open(p, 'rb').read(1)\n"
                                     "    except OSError:\n        pass\n"
                                     "assert len(found) <= 4, 'saw the grader'"],
        # left-behind processes
        "kills_the_workers": [daemon("import signal, time\nfor _ in range(200):\n    for p in os.listdir('/proc'):\n"
                                     "        if p.isdigit() and int(p) != os.getpid():\n            try:\n"
                                     "                os.kill(int(p), signal.SIGKILL)\n            except OSError:\n"
                                     "                pass\n    time.sleep(0.05)")],
        "serves_answers_over_a_socket": [daemon(
            "import socket, time\ns = socket.socket(socket.AF_UNIX)\ns.bind('/tmp/answers.sock')\ns.listen()\n"
            "s.settimeout(20)\ntry:\n    c, _ = s.accept()\n    c.sendall(b'0')\nexcept OSError:\n    pass"),
            "import time\ntime.sleep(1)\n\ndef lcg_index(i, n, a, c, x0):\n    import socket\n"
            "    s = socket.socket(socket.AF_UNIX)\n    s.connect('/tmp/answers.sock')\n    return int(s.recv(10))"],
        "kills_its_grandparent": ["import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
                                  "os.kill(1, signal.SIGKILL)"],
        # around the audit hook: files read without `open`, the tests' answer, a process started
        "reads_the_solution_by_dir_fd": [reader("dir_fd", SOLUTION) + FROM_FILE],
        "reads_the_solution_with_torch": [reader("torch", SOLUTION) + FROM_FILE],
        "runs_cat_around_the_hook": [reader("subprocess.sys", SOLUTION) + FROM_FILE],
        "finds_the_answer_in_tests": [reader("open", TESTS_WITH_ANSWER) + FROM_FILE],
        "reads_tests_by_dir_fd": [reader("dir_fd", TESTS_WITH_ANSWER) + FROM_FILE],
        # denial of service and smaller faults
        "crafts_an_answer_frame": ["import os, struct, sys\n\ndef lcg_index(i, n, a, c, x0):\n"
                                   "    for fd in range(3, 20):\n        try:\n"
                                   "            os.write(fd, struct.pack('>I', 2**31 - 1) + b'[' * 2**16)\n"
                                   "        except OSError:\n            pass\n    return 0"],
        "forges_predictions": ["import json, os\nwith open(os.path.join(os.environ['PERFLAB_RESULTS'], 'predictions.jsonl'), 'a') as f:\n"
                               "    f.write(json.dumps({'lesson': '07', 'key': 'k', 'predicted': 1.0, 'measured': 1.0, "
                               "'error_pct': 0.0}) + '\\n')"],
        "=1+1": ["raise ValueError('\\x1b[2J\\x1b[31mcleared your screen\\x07')"],
        "exits_the_worker": ["def lcg_index(i, n, a, c, x0):\n    import os\n    os._exit(0)"],
        "deletes_the_class": [f"import shutil\nshutil.rmtree({str(subs)!r}, ignore_errors=True)\n"
                              f"shutil.rmtree({str(ROOT / 'labs')!r}, ignore_errors=True)"],
        "writes_the_teachers_home": ["import os\nfor p in ('/root/.bashrc', os.path.expanduser('~/.bashrc'), "
                                     "'/etc/perflab-poison'):\n    try:\n        open(p, 'a').write('x')\n"
                                     "    except OSError:\n        pass\nassert not os.path.exists('/etc/perflab-poison')"],
        "forks_in_the_worker": ["def lcg_index(i, n, a, c, x0):\n    import os\n    if os.fork() == 0:\n"
                                "        os._exit(0)\n    return 0"],
        "reads_the_graders_mem": ["import os\nseen = []\nfor p in os.listdir('/proc'):\n    if p.isdigit() and int(p) != os.getpid():\n"
                                  "        try:\n            open(f'/proc/{p}/mem', 'rb').close()\n            seen.append(p)\n"
                                  "        except OSError:\n            pass\nassert len(seen) <= 4, 'read the grader'"],
        "reads_the_teachers_token": ["import os\nraise ValueError('token ' + os.environ.get('PERFLAB_CORPUS_TOKEN', 'none'))"],
        "talks_to_a_daemon": [f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({str(DAEMON)!r})\ns.sendall(b'x')"],
        "many_sleepers": [daemon("import time\nfor _ in range(20):\n    if os.fork() == 0:\n        time.sleep(300)\n"
                                 "        os._exit(0)\ntime.sleep(300)")],
    }


def class_of(tmp: Path) -> tuple[Path, Path, dict[str, list[str]]]:
    course = tmp / "labs"
    asks = "\nfrom perflab.course import predict\nask = predict.ask"  # a lab that asks: predictions recorded
    write(course / "07_shuffle.ipynb", notebook([SETUP, STUB]))
    write(course / "11_asks.ipynb", notebook([SETUP + asks, STUB]))  # in the course, not graded here
    subs = tmp / "submissions"
    victim = write(subs / "ada" / "07_shuffle.ipynb", notebook([SETUP, RIGHT]))
    write(subs / "stan" / "07_shuffle.ipynb", notebook([SETUP, STUB]))
    write(subs / "tom" / "07_shuffle.ipynb", notebook([SETUP, "import torch\n\n" + RIGHT.replace(
        "    m = lab.modulus(n)", "    import torch\n    m = int(torch.tensor(lab.modulus(n)))")]))  # honest, with torch
    forgeries = kernel_forgeries(subs, victim)
    for k, (_lab, _what, cells) in enumerate(f for f in JUDGE_FORGERIES if f[0] == "07_shuffle"):
        forgeries[f"judge_{k}"] = cells  # the judge's corpus (test_judge.py), through the whole grader
    for who, cells in forgeries.items():
        write(subs / who / "07_shuffle.ipynb", notebook([SETUP, STUB, *cells]))
    # a symbolic link to the solution, a folder that links to another learner's, a huge and a many-celled notebook
    (subs / "links").mkdir()
    (subs / "links" / "07_shuffle.ipynb").symlink_to(SOLUTION)
    (subs / "borrows").symlink_to(subs / "ada")
    write(subs / "huge" / "07_shuffle.ipynb", notebook([SETUP, STUB, "x = '" + "a" * (MAX_NOTEBOOK_BYTES + 10) + "'"]))
    write(subs / "cells" / "07_shuffle.ipynb", notebook([SETUP, STUB] + ["1"] * (MAX_NOTEBOOK_CELLS + 1)))
    forgeries.update({k: [] for k in ("links", "borrows", "huge", "cells")})
    # lab 15 as shipped, its solution and its stub handed in (graded with the class: done, and not done)
    write(course / "15_at_scale.ipynb", json.loads((LABS / "15_at_scale.ipynb").read_text()))
    write(subs / "lin" / "15_at_scale.ipynb", json.loads((LABS / "solutions" / "15_at_scale.ipynb").read_text()))
    write(subs / "sam" / "15_at_scale.ipynb", json.loads((LABS / "15_at_scale.ipynb").read_text()))
    return course, subs, forgeries


def notebook(code_cells: list[str]) -> dict:
    cells = [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": "smoke = False", "outputs": [],
              "execution_count": None}]
    cells += [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
              for c in code_cells]
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                         "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}


def write(path: Path, nb: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb))
    return path


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


def left_behind(since: float, marker: str, learners) -> list[str]:
    """Processes of this run still alive: started since `since`, by one of `learners` (their
    PERFLAB_LEARNER; other test workers may be grading classes of their own meanwhile) or naming `marker`."""
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


@needs_sandbox
@pytest.mark.slow
def test_a_hostile_class_is_graded_in_the_sandbox_and_changes_nothing(tmp_path, monkeypatch):
    import socket

    monkeypatch.setenv("PERFLAB_CORPUS_TOKEN", "s3cr3t-of-the-teacher")
    course, subs, forgeries = class_of(tmp_path)
    daemon_socket = socket.socket(socket.AF_UNIX)
    daemon_socket.bind(str(DAEMON))
    daemon_socket.listen()
    daemon_socket.setblocking(False)
    env_before, pyc_before, subs_before = environment_state(), bytecode_state(), tree_state(subs)
    t0 = time.time()
    book = gb.grade_folder(subs, course=course, labs=["07", "15"], timeout=TIMEOUT, jobs=2,
                           limits=gb.Limits(memory_bytes=3 * 2**30), secret="corpus")
    got = {r.learner: r for r in book.records}
    time.sleep(1)
    try:
        with pytest.raises(BlockingIOError):
            daemon_socket.accept()  # no learner reached it
    finally:
        daemon_socket.close()
        DAEMON.unlink()
    assert "s3cr3t" not in book.csv_text() and "token none" in got["reads_the_teachers_token"].message
    assert not left_behind(t0, str(tmp_path), set(forgeries)), left_behind(t0, str(tmp_path), set(forgeries))
    assert book.isolated
    # every forgery graded anything but done, each with a message
    for who in forgeries:
        assert who in got, (who, book.notes)
        assert got[who].outcome in NOT_DONE and got[who].message, (who, got[who].outcome, got[who].message)
    assert len(forgeries) >= 36  # with the judge-side ones below (5 back doors, 4 of lab 11): 46 in sandboxed mode
    # the honest learners, as when each is graded alone
    for who in ("ada", "stan", "tom"):
        alone = gb.grade_one(gb.Submission(who, gb.course_labs(course)["07"], subs / who / "07_shuffle.ipynb"),
                             timeout=TIMEOUT, limits=gb.Limits(memory_bytes=3 * 2**30), secret="corpus",
                             isolation=gb.Isolation(BOX, tuple(map(str, gb.hidden_from_learners(subs, {})))))
        assert (got[who].outcome, got[who].message) == (alone.outcome, alone.message), who
    assert got["ada"].outcome == "done" and got["tom"].outcome == "done" and got["stan"].outcome == "not done"
    assert got["lin"].outcome == "done", got["lin"].message  # lab 15: its solution, then its stub
    assert got["sam"].outcome == "not done" and "recompute policy" in got["sam"].message, got["sam"].message
    # the refusals say why
    assert "symbolic link" in got["links"].message and "symbolic link" in got["borrows"].message
    assert "MiB" in got["huge"].message and "cells" in got["cells"].message
    assert got["forges_predictions"].predictions == []  # lab 07 asks for none
    # nothing outside the run's folders changed, nothing new in the environment, the submissions as handed in
    env_after = environment_state()
    assert sorted(set(env_after) ^ set(env_before)) == [] and env_after == env_before
    assert bytecode_untouched(pyc_before) == []
    assert tree_state(subs) == subs_before
    # safe output: the formula is text, the escape sequences are gone from what is printed
    assert "\n'=1+1," in book.csv_text()
    text = book.summary()
    assert "\x1b" not in text and "\x07" not in text and "cleared your screen" in text


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
def test_an_environment_under_tmp_is_put_back_over_the_private_tmp(monkeypatch):
    """A checkout cloned under /tmp (its venv and perflab there): the private /tmp hides it, so the
    environment and perflab must be bound again after it, or the confined Python cannot start."""
    venv = Path("/tmp/clone/.venv")
    monkeypatch.setattr(sandbox, "needed", lambda: [venv, Path("/tmp/clone/perflab"), Path("/usr")])
    cmd = sandbox.Sandbox("bwrap").command(["true"], hidden=[Path("/tmp/clone")])
    pairs = list(zip(cmd, cmd[1:]))
    assert ("--tmpfs", "/tmp/clone") not in pairs  # the private /tmp already hides it
    assert ("--ro-bind", str(venv)) in pairs and ("--ro-bind", "/tmp/clone/perflab") in pairs
    assert cmd.index("/tmp") < cmd.index(str(venv))  # bound after the private /tmp is mounted
    assert ("--ro-bind", "/usr") not in pairs
