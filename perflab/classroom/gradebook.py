"""Grade a class's labs: every submitted lab notebook run in a fresh kernel, one gradebook.

    book = grade_folder("submissions/", labs=["01", "07"], timeout=300, jobs=2)
    book.write_csv("gradebook.csv"); print(book.summary())

Submissions: one folder per learner (`alice/01_flops.ipynb`, as an LMS export gives them, nested
folders allowed). A notebook is matched to a course lab by its number (`01_…`, `lab1.ipynb`,
`alice_01_flops_v2.ipynb`) or, without a number, by the lab's name (`flops.ipynb`); what cannot be
matched is said in one line each.

Every submission's bytes are read first, before any learner's code runs (a symbolic link, anything
but a regular file, a notebook over 16 MiB or 2000 cells is refused); the kernel and the judge get
copies of them. Each submission runs:
* confined by the operating system (sandbox.py, bubblewrap): a read-only system and course, no
  labs, tests, solutions or other learner's files in view, a private /tmp and writable folder of its
  own, its own PID and network namespaces; without bubblewrap grading stops in one line unless
  `isolate=False` (`--no-sandbox`), and then every report says that the grades are not isolated;
* in a copy, in a private temporary folder (its working directory), never in the learner's folder;
* in a fresh kernel under papermill (smoke sizes, as the test suite runs the labs);
* with a wall-clock timeout for the whole notebook (the kernel and its children are killed);
* under resource limits that its kernel inherits from the runner (`resource`): address space (data
  segment on an NVIDIA box, where CUDA reserves a huge address space), CPU time, size of a written
  file, processes;
* with its own `PERFLAB_RESULTS` folder, from which the learner's predictions are read, for a lab
  that asks for them (`predictions.jsonl`: one JSON object per line, fields lesson, key, question,
  unit, predicted, measured, error_pct, device, time);
* N at a time, at most one per core, each kernel's threads sharing the cores.

That run can only lower a grade: its first error output (`wrong` for a check's LabCheckError,
`error` otherwise), a kernel that died before the grader's last cell, a deleted check cell (`not
done`), a timeout. Nothing it prints or writes can raise one. The grade itself is the judge's
(perflab/classroom/judge.py): a separate, trusted process that reads the submission's snapshot, runs
the learner's answer functions in a confined worker on inputs drawn from a per-run secret and the
learner's name, and compares them with perflab's references in its own process. Outcomes: `done`
(every check passed, on the grading inputs too), `not done`, `wrong` (the check's message),
`error` (an exception's first line; a malformed notebook; a kernel that died), `timeout`.
Everything printed is cleaned of control characters; a CSV cell a spreadsheet would run as a
formula is quoted.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perflab.classroom.sandbox import Sandbox
from perflab.core.errors import InputError

OUTCOMES = ("done", "not done", "wrong", "error", "timeout")
MARK = "PERFLAB-GRADE "  # what the grader's own last cell prints: the notebook ran to its end (nothing more)
GRADE_CELL = (
    "# added by perflab grade: the notebook ran to its end\n"
    f"print({MARK!r} + 'end')\n"
)
LAB_GLOB = "[0-9][0-9]*_*.ipynb"  # 01_flops.ipynb, 04b_tile_config.ipynb
CHECK_CALL = re.compile(r"^\s*(?:\w+\s*=\s*)?lab\.(check\w*)\(", re.M)
PREDICT_CALL = re.compile(r"\bpredict\.ask\b")
PREDICTION_FIELDS = ("lesson", "key", "question", "unit", "predicted", "measured", "error_pct", "device", "time")


def need_papermill():
    from perflab.core.extras import need

    what = "grading runs the notebooks with papermill"
    return need("papermill", "course", what), need("nbformat", "course", what)


# ----------------------------------------------------------------------------- the course's labs
@dataclass(frozen=True)
class Lab:
    number: str  # '01'
    name: str  # '01_flops'
    path: Path
    checks: tuple[str, ...]  # the check calls of the shipped lab, each must still be there
    predicts: bool = False  # whether the shipped lab asks for predictions (course.predict): only then are they recorded

    @property
    def topic(self) -> str:
        return self.name.split("_", 1)[1] if "_" in self.name else self.name


def default_labs_dir() -> Path | None:
    """The course's labs/: in the working directory, else beside the perflab package (a checkout)."""
    import perflab

    for cand in (Path.cwd() / "labs", Path(perflab.__file__).resolve().parents[1] / "labs"):
        if cand.is_dir() and any(cand.glob(LAB_GLOB)):
            return cand
    return None


def course_labs(labs_dir: Path | str | None = None) -> dict[str, Lab]:
    """Every lab of the course by number, with the check calls the shipped notebook makes."""
    folder = Path(labs_dir) if labs_dir is not None else default_labs_dir()
    if folder is None or not folder.is_dir():
        raise InputError(f"no course labs at {folder or 'labs/'}: pass --course PATH/TO/labs (the folder with 01_flops.ipynb …)")
    labs = {}
    for path in sorted(folder.glob(LAB_GLOB)):
        try:
            nb = json.loads(path.read_text())
            code = "\n".join("".join(c.get("source", "")) for c in nb.get("cells", []) if c.get("cell_type") == "code")
        except (OSError, ValueError):
            code = ""
        number = path.stem.split("_", 1)[0]
        labs[number] = Lab(number, path.stem, path, tuple(dict.fromkeys(CHECK_CALL.findall(code))),
                           bool(PREDICT_CALL.search(code)))
    if not labs:
        raise InputError(f"no lab notebooks (NN_name.ipynb) in {folder}: pass --course PATH/TO/labs")
    return labs


def pick_labs(labs: dict[str, Lab], only: Sequence[str] | None) -> dict[str, Lab]:
    """`--labs 01,7,flops` → those labs; an unknown one is an error that lists the course's labs."""
    if not only:
        return labs
    chosen: dict[str, Lab] = {}
    for item in only:
        item = str(item).strip()
        if not item:
            continue
        lab = match_lab(item, labs)
        if lab is None:
            raise InputError(f"no lab {item!r} in this course: choose from {', '.join(labs)}")
        chosen[lab.number] = lab
    return chosen


def match_lab(name: str, labs: dict[str, Lab]) -> Lab | None:
    """The lab a file name means: by its first number (01, 1, lab7, 04b), else by a lab's name in it."""
    stem = Path(name).stem.lower()
    num = re.search(r"(?<![0-9])([0-9]{1,2})(?![0-9])([a-z]?)", stem)
    if num:
        key = f"{int(num.group(1)):02d}"
        if num.group(2) and key + num.group(2) in labs:  # 04b_tile_config
            return labs[key + num.group(2)]
        return labs.get(key)
    words = re.sub(r"[^a-z0-9]+", "_", stem)
    hits = [lab for lab in labs.values() if lab.topic.lower() in words]
    return hits[0] if len(hits) == 1 else None


# ----------------------------------------------------------------------------- submissions
@dataclass
class Submission:
    learner: str
    lab: Lab
    path: Path
    data: bytes | None = None  # its bytes, read before any learner's code runs (snapshot)
    refused: str = ""  # why it is not graded (a link, not a regular file, too large)


def snapshot(subs: Sequence[Submission], root: Path | str) -> None:
    """Read every submission's bytes now, before the first kernel starts: the kernels and the judge
    get copies of these, so no learner's code can change what is graded (its own or another's).
    A symbolic link anywhere below `root`, or anything but a regular file, is refused."""
    from perflab.classroom.judge import MAX_NOTEBOOK_BYTES

    top = Path(os.path.abspath(root))
    for sub in subs:
        path = Path(os.path.abspath(sub.path))
        try:
            parts = path.relative_to(top).parts
        except ValueError:
            parts = ()
        links = [top.joinpath(*parts[:i + 1]) for i in range(len(parts)) if top.joinpath(*parts[:i + 1]).is_symlink()]
        if links:
            sub.refused = f"{links[0].relative_to(top)} is a symbolic link: hand in the notebook itself"
            continue
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError as e:
            sub.refused = f"cannot read the notebook ({e.strerror})"
            continue
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                sub.refused = "not a regular file: hand in the notebook itself"
            elif info.st_size > MAX_NOTEBOOK_BYTES:
                sub.refused = (f"malformed notebook (it is {info.st_size / 2**20:.1f} MiB, over the "
                               f"{MAX_NOTEBOOK_BYTES // 2**20} MiB a lab may be: clear its outputs)")
            else:
                with os.fdopen(fd, "rb", closefd=False) as f:
                    sub.data = f.read(MAX_NOTEBOOK_BYTES + 1)
                if len(sub.data) > MAX_NOTEBOOK_BYTES:
                    sub.data, sub.refused = None, "malformed notebook (over the size a lab may be)"
        finally:
            os.close(fd)


def find_submissions(root: Path | str, labs: dict[str, Lab], course: dict[str, Lab] | None = None
                     ) -> tuple[list[Submission], list[str]]:
    """Submissions under `root` (one folder per learner) for `labs`; and one line per notebook
    that could not be matched (or that was left out, being an older copy of the same lab)."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root} is not a folder: give the folder that holds one folder per learner")
    course = course or labs
    subs: list[Submission] = []
    notes: list[str] = []
    for item in sorted(root.iterdir()):
        if item.name.startswith("."):
            continue
        if item.is_file():
            if item.suffix == ".ipynb":
                notes.append(f"{item.name}: not in a learner's folder; put it in a folder named after the learner")
            continue
        found: dict[str, list[Path]] = {}
        for nb in sorted(item.rglob("*.ipynb")):
            if any(part.startswith(".") for part in nb.relative_to(item).parts):
                continue  # .ipynb_checkpoints and other hidden copies
            lab = match_lab(nb.name, course)
            if lab is None:
                num = re.search(r"(?<![0-9])([0-9]{1,2})(?![0-9])", nb.stem)
                why = (f"no lab {int(num.group(1)):02d} in this course (its labs: {', '.join(course)})" if num else
                       f"no lab number or lab name in the file name (name it like {next(iter(course.values())).name}.ipynb)")
                notes.append(f"{item.name}/{nb.relative_to(item)}: {why}")
            elif lab.number in labs:
                found.setdefault(lab.number, []).append(nb)
        for number, paths in found.items():
            paths.sort(key=lambda p: p.stat().st_mtime)
            if len(paths) > 1:
                notes.append(f"{item.name}: {len(paths)} notebooks for lab {number}; graded the newest, "
                             f"{paths[-1].relative_to(item)}")
            subs.append(Submission(item.name, labs[number], paths[-1]))
    return subs, notes


# ----------------------------------------------------------------------------- one run
@dataclass
class Limits:
    """What one submission's kernel may use; None leaves a limit as it is."""

    memory_bytes: int | None = 4 * 2**30
    cpu_s: int | None = None  # default: twice the timeout (a kernel may use more than one core)
    file_bytes: int | None = 2**30

    def apply(self, cpu_s: int) -> None:
        """Set the limits on this process (the kernel it starts inherits them)."""
        import resource

        def cap(which: int, value: int | None) -> None:
            if value is None:
                return
            try:
                soft, hard = resource.getrlimit(which)
                new_hard = hard if hard != resource.RLIM_INFINITY and hard < value else value
                resource.setrlimit(which, (min(value, new_hard), new_hard))
            except (ValueError, OSError) as e:  # a limit this system does not enforce (macOS: RLIMIT_AS)
                print(f"perflab grade: this system does not take that limit ({e}); running without it", flush=True)

        # CUDA reserves far more address space than it uses, so on an NVIDIA box the data
        # segment (memory actually allocated) is capped instead of the address space
        mem = resource.RLIMIT_DATA if _has_nvidia_gpu() else resource.RLIMIT_AS
        cap(mem, self.memory_bytes)
        cap(resource.RLIMIT_CPU, self.cpu_s or cpu_s)
        cap(resource.RLIMIT_FSIZE, self.file_bytes)


def _has_nvidia_gpu() -> bool:
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


@dataclass
class Record:
    learner: str
    lab: str
    outcome: str
    message: str = ""
    seconds: float = 0.0
    notebook: str = ""
    predictions: list[dict[str, Any]] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        errs = [abs(float(p["error_pct"])) for p in self.predictions
                if isinstance(p.get("error_pct"), (int, float)) and p["error_pct"] == p["error_pct"]]
        errs.sort()
        return {"learner": self.learner, "lab": self.lab, "outcome": self.outcome, "message": self.message,
                "seconds": round(self.seconds, 1), "predictions": len(self.predictions),
                "median_prediction_error_pct": round(errs[len(errs) // 2], 1) if errs else "",
                "notebook": self.notebook}


def first_line(text: str) -> str:
    text = clean(str(text), keep_lines=True).strip()
    return text.splitlines()[0].strip() if text else ""


def clean(text: str, keep_lines: bool = False) -> str:
    """`text` without terminal escape sequences or control characters (a learner's message is
    printed to the teacher's terminal); line breaks kept where asked."""
    text = re.sub(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])", "", str(text))
    keep = "\n" if keep_lines else ""
    return "".join(ch for ch in text if ch in keep or (ch.isprintable() and ch not in "\u2028\u2029")
                   or ch == " ")


def load_notebook(source: Path | bytes) -> tuple[Any, str]:
    """(notebook, '') or (None, why it cannot be run); bounded in bytes and cells (judge.read_notebook)."""
    import warnings

    from perflab.classroom.judge import read_notebook

    _, nbformat = need_papermill()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # cells without ids (older Jupyter) are fine to run
        try:
            data = source if isinstance(source, bytes) else Path(source).read_bytes()
            read_notebook(data)  # within its bounds before nbformat builds it
            nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        except Exception as e:  # JSON errors, a notebook of an unknown format, a file that is not text
            return None, f"malformed notebook ({first_line(str(e)) or type(e).__name__})"
        try:
            nbformat.validate(nb)
        except Exception as e:
            return None, f"malformed notebook ({first_line(str(e))[:120]})"
    if not any(c.get("cell_type") == "code" for c in nb.cells):
        return None, "malformed notebook (no code cells)"
    return nb, ""


def classify(nb: Any, lab: Lab) -> tuple[str, str]:
    """What the learner's own kernel run says, which can only take a grade *down*: its first error
    output ('wrong' for a check's LabCheckError, else 'error'), a run that stopped before the
    grader's last cell, a check cell removed. ('ran', '') otherwise: the verdict is the judge's.

    The states the kernel printed are not read: the learner's code could have written them."""
    ended = False
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                ename, evalue = str(out.get("ename", "")), str(out.get("evalue", ""))
                if ename == "LabCheckError":
                    return "wrong", first_line(evalue)
                return "error", f"{ename}: {first_line(evalue)}" if evalue.strip() else ename
            if out.get("output_type") == "stream":
                ended = ended or any(line.strip() == MARK + "end" for line in "".join(out.get("text", "")).splitlines())
    if not ended:
        return "error", "the notebook stopped before its end (the kernel died or the file was changed while it ran)"
    removed = removed_checks(nb, lab)
    if removed:
        return "not done", f"check cell removed: {', '.join(removed)}"
    return "ran", ""


def removed_checks(nb: Any, lab: Lab) -> list[str]:
    """The shipped lab's check calls that the notebook no longer makes (read from its source)."""
    cells = nb.cells if hasattr(nb, "cells") else nb.get("cells", [])
    code = "\n".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")
    return [c for c in lab.checks if not re.search(rf"lab\.{c}\(", code)]


def read_predictions(results: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    data = read_left(results / "predictions.jsonl", 2**20)
    for line in (data or b"").decode(errors="replace").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append({k: item.get(k) for k in PREDICTION_FIELDS})
    return out


@dataclass(frozen=True)
class Isolation:
    """How the learners' processes are confined: a sandbox (None: not isolated, `--no-sandbox`), the
    folders hidden from them, and the grader's own bytecode cache (for the judge and the worker)."""

    sandbox: Sandbox | None = None
    hidden: tuple[str, ...] = ()
    pycache: str | None = None


def grade_one(sub: Submission, *, timeout: float, limits: Limits, threads: int = 1,
              env: dict[str, str] | None = None, secret: str | None = None,
              isolation: Isolation | None = None) -> Record:
    """Run one submission in a copy, in a fresh kernel (what it says can only lower the grade);
    then the judge's verdict, from a process the learner's code never runs in (judge.py)."""
    iso = isolation or Isolation()
    rec = Record(sub.learner, sub.lab.name, "error", notebook=str(sub.path))
    if sub.refused:
        rec.message = sub.refused
        return rec
    if sub.data is None:
        snapshot([sub], sub.path.parent)
        if sub.refused or sub.data is None:
            rec.message = sub.refused or "cannot read the notebook"
            return rec
    nb, why = load_notebook(sub.data)
    if nb is None:
        rec.message = why
        return rec
    _, nbformat = need_papermill()
    nb.cells.append(nbformat.v4.new_code_cell(GRADE_CELL))
    # the submission's own folder (its copy, its working directory, its results, its home) and,
    # apart from it, the grader's (the executed notebook, the runner's log), out of reach of relative paths
    box, tmp = Path(tempfile.mkdtemp(prefix="perflab-grade-")), Path(tempfile.mkdtemp(prefix="perflab-grader-"))
    work, results, home = box / "work", box / "results", box / "home"
    for d in (work, results, home):
        d.mkdir()
    src, dst = work / _safe_name(sub.path.name), tmp / "executed.ipynb"
    nbformat.write(nb, str(src))
    run_env = dict(os.environ if env is None else env)
    if iso.sandbox is not None:  # the teacher's credentials stay out of the learner's kernel
        run_env = {k: v for k, v in run_env.items() if not CREDENTIAL.search(k)}
    run_env.update(PERFLAB_RESULTS=str(results), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                   PYTHONUNBUFFERED="1", PERFLAB_LEARNER=sub.learner)
    if iso.sandbox is not None:  # the home it sees is its own: Jupyter's runtime files, IPython's, matplotlib's
        run_env.update(HOME=str(home), JUPYTER_RUNTIME_DIR=str(home / "runtime"), IPYTHONDIR=str(home / "ipython"),
                       MPLCONFIGDIR=str(home / "mpl"), TMPDIR="/tmp")
    cpu_s = int(limits.cpu_s or max(60, 2 * timeout * threads))
    cmd = [sys.executable, "-m", "perflab.classroom.gradebook", str(src), str(dst), str(work),
           json.dumps(asdict(limits)), str(cpu_s)]
    if iso.sandbox is not None:
        cmd = iso.sandbox.command(cmd, writable=[box, tmp], hidden=iso.hidden, cwd=tmp)
    t0 = time.monotonic()
    log = open(tmp / "runner.log", "wb")
    proc = subprocess.Popen(cmd, cwd=tmp, env=run_env, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        proc.wait(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        _kill_tree(proc)
        log.close()
    rec.seconds = time.monotonic() - t0
    rec.predictions = read_predictions(results) if sub.lab.predicts else []
    from perflab.classroom.judge import MAX_NOTEBOOK_BYTES

    executed = read_left(dst, MAX_NOTEBOOK_BYTES + 2**20)  # a notebook's bound, and its outputs
    try:
        done = load_notebook(executed)[0] if executed is not None else None
    except Exception:  # the runner was killed while writing it
        done = None
    if timed_out:
        rec.outcome, rec.message = "timeout", f"still running after {timeout:g} s" + _running_cell(done)
    elif done is None:
        rec.outcome, rec.message = "error", "the kernel could not run the notebook: " + _last_line(tmp / "runner.log")
    else:
        rec.outcome, rec.message = classify(done, sub.lab)
        if rec.outcome == "error" and rec.message.startswith("the notebook stopped"):
            rec.message = f"{_last_line(tmp / 'runner.log')} (memory or CPU-time limit?)"
    shutil.rmtree(tmp, ignore_errors=True)
    if rec.outcome == "ran":
        rec.outcome, rec.message = run_judge(sub, secret=secret or secrets.token_hex(16), timeout=timeout,
                                             limits=limits, threads=threads, env=env, isolation=iso)
        rec.seconds = time.monotonic() - t0
    shutil.rmtree(box, ignore_errors=True)
    rec.message = clean(rec.message)
    return rec


# environment variables that carry a credential of the grading user: never given to a learner's kernel
CREDENTIAL = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|_KEY|^KEY|APIKEY|SSH_|GPG_|DBUS|"
                        r"KRB5|DOCKER_HOST", re.I)


def _safe_name(name: str) -> str:
    """A file name for the submission's copy: its own, without anything a path or a shell would read."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(name).stem).strip("._") or "submission"
    return stem[:80] + ".ipynb"


def run_judge(sub: Submission, *, secret: str, timeout: float, limits: Limits, threads: int = 1,
              env: dict[str, str] | None = None, isolation: Isolation | None = None) -> tuple[str, str]:
    """The judge's (outcome, message) for `sub`: a fresh, trusted process (judge.trusted_python) that
    reads the snapshot of the submitted notebook, runs its answers in a confined worker and grades
    them with the lab's checks on inputs drawn from `secret` and the learner's name. Its answer
    carries a nonce only it was told."""
    from perflab.classroom import judge

    iso = isolation or Isolation()
    if sub.data is None:
        snapshot([sub], sub.path.parent)
        if sub.data is None:
            return "error", sub.refused or "cannot read the notebook"
    nonce = secrets.token_hex(8) + " "
    job = {"notebook": sub.data.decode("utf-8", errors="replace"), "shipped": str(sub.lab.path),
           "learner": sub.learner, "secret": secret, "nonce": nonce,
           "course_dirs": [str(sub.lab.path.parent.resolve())],
           "memory_bytes": limits.memory_bytes, "cpu_s": int(limits.cpu_s or max(60, 2 * timeout * threads)),
           "threads": threads, "sandbox": iso.sandbox.tool if iso.sandbox else None, "hidden": list(iso.hidden),
           "pycache": iso.pycache}
    env = {k: v for k, v in (os.environ if env is None else env).items() if not k.startswith("PERFLAB_RESULTS")}
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(judge.trusted_python(judge.__file__, pycache=iso.pycache), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(json.dumps(job, ensure_ascii=False).encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        return "timeout", f"the grader's run of your answers took more than {timeout:.0f} s"
    finally:
        _kill_tree(proc)
    for line in out.decode(errors="replace").splitlines():
        if line.startswith(nonce):
            try:
                got = json.loads(line[len(nonce):])
            except ValueError:
                break
            if got.get("outcome") in ("done", "not done", "wrong", "error"):
                return str(got["outcome"]), clean(str(got.get("message", "")))
    return "error", "the grader's run of your answers gave no verdict"


def _running_cell(nb: Any) -> str:
    if nb is None:
        return ""
    for i, cell in enumerate(nb.cells):
        status = cell.get("metadata", {}).get("papermill", {}).get("status")
        if status == "running":
            line = next((ln for ln in "".join(cell.get("source", "")).splitlines() if ln.strip()
                         and not ln.lstrip().startswith("#")), "")
            return f" (cell {i}: {line.strip()[:60]})"
    return ""


def read_left(path: Path, limit: int) -> bytes | None:
    """A file the learner's sandbox could write (its results, the executed notebook, the runner's
    log), read by the unconfined grader: only a regular file, never through a symbolic link (which
    would point at a file of the grader's own view: a FIFO that blocks, /proc/kcore), at most `limit`
    bytes (the last ones). None where it is not such a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None
        f.seek(max(0, st.st_size - limit))
        return f.read(limit)


def _last_line(path: Path) -> str:
    data = read_left(path, 2**20)
    if data is None:
        return "no output"
    lines = [ln for ln in data.decode(errors="replace").splitlines()
             if ln.strip() and "WARNING | Kernel is running over TCP" not in ln]
    errors = [ln for ln in lines if re.search(r"(Error|Exception|died)\b", ln)]
    return first_line((errors or lines or ["no output"])[-1])[:200]


def _kill_tree(proc: subprocess.Popen) -> None:
    """Stop the runner and everything it started (the kernel lives in a session of its own)."""
    import psutil

    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        kids = []
    for p in [*kids]:
        try:
            p.kill()
        except psutil.Error:
            pass
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    psutil.wait_procs(kids, timeout=5)


# ----------------------------------------------------------------------------- the class
@dataclass
class Gradebook:
    records: list[Record]
    labs: list[str]
    notes: list[str]
    seconds: float
    jobs: int
    timeout: float
    isolated: bool = True  # each learner's processes confined by the sandbox (False: --no-sandbox)

    def as_dict(self) -> dict[str, Any]:
        return {"labs": self.labs, "jobs": self.jobs, "timeout_s": self.timeout, "seconds": round(self.seconds, 1),
                "isolated": self.isolated, **({} if self.isolated else {"warning": NOT_ISOLATED}),
                "unmatched": self.notes, "records": [dict(asdict(r), seconds=round(r.seconds, 1)) for r in self.records],
                "passed": self.passed()}

    def passed(self) -> dict[str, int]:
        return {lab: sum(1 for r in self.records if r.lab == lab and r.outcome == "done") for lab in self.labs}

    def csv_text(self) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=[*Record("", "", "").row(), "isolated"])
        w.writeheader()
        for r in self.records:
            w.writerow({k: spreadsheet_safe(v) for k, v in {**r.row(), "isolated": "yes" if self.isolated else
                                                             "NO (--no-sandbox)"}.items()})
        return buf.getvalue()

    def write_csv(self, path: Path | str) -> None:
        Path(path).write_text(self.csv_text())

    def summary(self, width: int = 100) -> str:
        learners = sorted({r.learner for r in self.records})
        lines = [f"Graded {_count(len(self.records), 'notebook')} of {_count(len(learners), 'learner')} in {self.seconds:.0f} s "
                 f"({self.jobs} at a time, timeout {self.timeout:g} s each)"]
        if not self.isolated:
            lines.append(NOT_ISOLATED)
        head = f"{'lab':<22}" + "".join(f"{o:>10}" for o in OUTCOMES)
        lines += ["", head]
        for lab in self.labs:
            mine = [r for r in self.records if r.lab == lab]
            counts = Counter(r.outcome for r in mine)
            lines.append(f"{lab:<22}" + "".join(f"{counts.get(o, 0):>10}" for o in OUTCOMES)
                         + f"   {counts.get('done', 0)} of {len(learners)} learners passed")
        wrong = Counter((r.lab, r.message) for r in self.records if r.outcome == "wrong")
        if wrong:
            lines += ["", "Commonest wrong answers:"]
            for (lab, msg), n in wrong.most_common(5):
                lines.append(_cut(f"  {n}× {lab}: {msg}", width))
        errors = Counter((r.lab, r.outcome, r.message) for r in self.records if r.outcome in ("error", "timeout"))
        if errors:
            lines += ["", "Errors and timeouts:"]
            for (lab, outcome, msg), n in errors.most_common(5):
                lines.append(_cut(f"  {n}× {lab} {outcome}: {msg}", width))
        if self.notes:
            lines += ["", "Not graded:"] + [_cut(f"  {n}", width) for n in self.notes[:8]]
            if len(self.notes) > 8:
                lines.append(f"  … and {len(self.notes) - 8} more (see --json)")
        return "\n".join(clean(ln) for ln in lines)


NOT_ISOLATED = ("NOT ISOLATED: graded with --no-sandbox, each learner's code ran unconfined as this user and could "
                "have changed other learners' grades or this machine")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: one that would start a formula (= + - @, a tab or a
    carriage return) gets a leading apostrophe; control characters are removed. Numbers stay numbers."""
    if not isinstance(value, str):
        return value
    text = value if value[:1] in FORMULA_START[-2:] else clean(value)
    if text.startswith(FORMULA_START):
        text = "'" + clean(text)
    return text


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def grade_folder(root: Path | str, *, labs: Sequence[str] | None = None, course: Path | str | None = None,
                 timeout: float = 300.0, jobs: int | None = None, limits: Limits | None = None,
                 on_record: Callable[[Record], None] | None = None, secret: str | None = None,
                 isolate: bool = True) -> Gradebook:
    """Grade every submission under `root` (see the module's docstring). `isolate=False` runs the
    learners' code unconfined (`--no-sandbox`), and the gradebook says so."""
    from perflab.classroom import sandbox

    need_papermill()
    if not timeout > 0:
        raise InputError(f"timeout must be > 0 seconds (got {timeout})")
    box = sandbox.find() if isolate else None
    if isolate and box is None:
        raise InputError(f"cannot confine the learners' code: {sandbox.unavailable()}; or grade unconfined with "
                         "--no-sandbox (every report then says the grades are not isolated)")
    sandbox.protect()  # this process's memory and pipes out of reach of any learner's process
    all_labs = course_labs(course)
    chosen = pick_labs(all_labs, labs)
    subs, notes = find_submissions(root, chosen, all_labs)
    snapshot(subs, root)  # every submission's bytes, before any learner's code runs
    cores = usable_cores()
    jobs = max(1, min(jobs or max(1, cores // 2), cores))
    threads = max(1, cores // jobs)
    if limits is None:
        import psutil

        # the kernels share the memory: each may use its share, at most 8 GiB, at least 2 GiB
        share = psutil.virtual_memory().total // (jobs + 1)
        limits = Limits(memory_bytes=int(min(8 * 2**30, max(2 * 2**30, share))))
    t0 = time.monotonic()
    records: list[Record] = []
    secret = secret or secrets.token_hex(16)  # the grading inputs' seed: new for every class graded
    cache = tempfile.mkdtemp(prefix="perflab-pycache-")  # the judges' and workers' bytecode: the grader's own
    iso = Isolation(box, tuple(str(p) for p in hidden_from_learners(root, chosen)), cache)
    try:
        warm_cache(cache, chosen)

        def one(sub: Submission) -> Record:
            rec = grade_one(sub, timeout=timeout, limits=limits, threads=threads, secret=secret, isolation=iso)
            if on_record is not None:
                on_record(rec)
            return rec

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            records = list(pool.map(one, subs))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    records.sort(key=lambda r: (r.learner, r.lab))
    return Gradebook(records, [lab.name for lab in chosen.values()], [clean(n) for n in notes],
                     time.monotonic() - t0, jobs, timeout, isolated=box is not None)


def hidden_from_learners(root: Path | str, labs: dict[str, Lab]) -> list[Path]:
    """What no learner's process may see: the submissions, the course's labs (and their solutions),
    the checkout's tests and the checkout itself, the grader's working folder and home (the sandbox puts the
    Python environment and the perflab package back, read-only)."""
    import perflab

    checkout = Path(perflab.__file__).resolve().parents[1]
    out = [Path(root).resolve(), Path.cwd().resolve(), checkout / "labs", checkout / "tests", checkout,
           Path.home().resolve()]  # the grader's home: its keys and tokens (kept in view where Python is installed there)
    out += [lab.path.parent.resolve() for lab in labs.values()]
    return list(dict.fromkeys(out))


def warm_cache(cache: str, labs: dict[str, Lab]) -> None:
    """Fill the grader's bytecode cache once, in a trusted process (torch, numpy, the labs' modules),
    so that no judge or confined worker compiles them again for every learner."""
    from perflab.classroom import judge

    modules = ["torch", "numpy", "perflab.grading.checks", "perflab.classroom.sandbox"]
    for lab in labs.values():
        try:
            name = judge.lab_module_name(judge.read_notebook(lab.path.read_bytes()))
        except (OSError, ValueError):
            name = None
        if name:
            modules.append(name)
    code = "import importlib\nfor m in %r:\n    try:\n        importlib.import_module(m)\n    except Exception:\n        pass\n"
    script = Path(cache) / "warm.py"
    script.write_text(code % modules)
    with contextlib.suppress(subprocess.TimeoutExpired, OSError):
        subprocess.run([*judge.trusted_python(script, pycache=cache)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)


# ----------------------------------------------------------------------------- the runner process
def _run(src: str, dst: str, cwd: str, limits_json: str, cpu_s: str) -> int:
    """In the runner process: set the limits (the kernel inherits them), then papermill."""
    Limits(**json.loads(limits_json)).apply(int(cpu_s))
    _cap_processes()
    import papermill

    try:
        # the kernel starts in the submission's folder (nbclient's resources path); papermill
        # itself stays in the grader's, which the notebook may delete nothing of by a relative path
        papermill.execute_notebook(src, dst, parameters={"smoke": True}, kernel_name="python3",
                                   progress_bar=False, log_output=False, resources={"metadata": {"path": cwd}})
    except papermill.PapermillExecutionError:
        return 1  # the error is in the executed notebook, where the grader reads it
    return 0


def _cap_processes() -> None:
    """RLIMIT_NPROC for the kernel and what it starts (see judge.nproc_limit)."""
    import resource

    from perflab.classroom.judge import nproc_limit

    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        cap = nproc_limit()
        resource.setrlimit(resource.RLIMIT_NPROC, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))


if __name__ == "__main__":  # the runner: python -m perflab.classroom.gradebook SRC DST CWD LIMITS CPU_S
    sys.exit(_run(*sys.argv[1:6]))


def _count(n: int, noun: str) -> str:
    """'1 notebook', '3 notebooks'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
