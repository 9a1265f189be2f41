"""One submission graded: its notebook run in a fresh, confined kernel, then the judge's verdict.

    rec = grade_one(sub, timeout=300, limits=Limits(), isolation=Isolation(find(), hidden, cache))

`grade_one` runs the submission:
* confined by the operating system (sandbox.py, bubblewrap) where `isolation` has a sandbox: a
  read-only system and course, no labs, tests, solutions or other learner's files in view, a private
  /tmp and writable folder of its own, its own PID and network namespaces, none of the grader's
  credentials in its environment;
* in a copy, in a private temporary folder (its working directory), never in the learner's folder;
* in a fresh kernel under papermill (smoke sizes, as the test suite runs the labs), started by the
  runner process (`python -m perflab.classroom.runner SRC DST CWD LIMITS CPU_S`);
* with a wall-clock timeout for the whole notebook (the kernel and its children are killed);
* under resource limits that its kernel inherits from the runner (`Limits`: address space, or the
  data segment on an NVIDIA box, where CUDA reserves a huge address space; CPU time; the size of a
  written file; processes);
* with its own `PERFLAB_RESULTS` folder, from which the learner's predictions are read for a lab that
  asks for them.

What that run leaves can only lower the grade (evidence.py). The grade itself is the judge's
(`run_judge`: a trusted process, judge.py), and the `Record` holds both.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perflab.classroom.evidence import (
    GRADE_CELL,
    classify,
    clean,
    last_line,
    load_notebook,
    need_papermill,
    read_left,
    read_predictions,
    running_cell,
)
from perflab.classroom.sandbox import Sandbox
from perflab.classroom.submissions import Submission, snapshot
from perflab.core.jsonable import JSON


@dataclass
class Limits:
    """What one submission's kernel may use; None leaves a limit as it is."""

    memory_bytes: int | None = 4 * 2**30
    cpu_s: int | None = None  # default: twice the timeout (a kernel may use more than one core)
    file_bytes: int | None = 2**30

    def apply(self, cpu_s: int, *, nvidia: bool | None = None) -> None:
        """Set the limits on this process (the kernel it starts inherits them). `nvidia`: whether
        this is an NVIDIA box (None: look), where the data segment is capped instead of the address
        space."""
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
        mem = resource.RLIMIT_DATA if (_has_nvidia_gpu() if nvidia is None else nvidia) else resource.RLIMIT_AS
        cap(mem, self.memory_bytes)
        cap(resource.RLIMIT_CPU, self.cpu_s or cpu_s)
        cap(resource.RLIMIT_FSIZE, self.file_bytes)


def _has_nvidia_gpu() -> bool:
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


@dataclass
class Record:
    """One learner's lab in the gradebook: its outcome and message, the seconds it took, the notebook
    graded and, for a lab that asks for them, the predictions the learner's run recorded (as read)."""

    learner: str
    lab: str
    outcome: str
    message: str = ""
    seconds: float = 0.0
    notebook: str = ""
    predictions: list[dict[str, Any]] = field(default_factory=list)

    def row(self) -> JSON:
        """The gradebook's CSV row (and its column names), predictions as their count and median error."""
        errs = [abs(float(p["error_pct"])) for p in self.predictions
                if isinstance(p.get("error_pct"), (int, float)) and p["error_pct"] == p["error_pct"]]
        errs.sort()
        return {"learner": self.learner, "lab": self.lab, "outcome": self.outcome, "message": self.message,
                "seconds": round(self.seconds, 1), "predictions": len(self.predictions),
                "median_prediction_error_pct": round(errs[len(errs) // 2], 1) if errs else "",
                "notebook": self.notebook}


@dataclass(frozen=True)
class Isolation:
    """How the learners' processes are confined: a sandbox (None: not isolated, `--no-sandbox`), the
    folders hidden from them, and the grader's own bytecode cache (for the judge and the worker)."""

    sandbox: Sandbox | None = None
    hidden: tuple[str, ...] = ()
    pycache: str | None = None


def grade_one(sub: Submission, *, timeout: float, limits: Limits, threads: int = 1,
              env: dict[str, str] | None = None, secret: str | None = None,
              isolation: Isolation | None = None, launch: Launch | None = None) -> Record:
    """Run one submission in a copy, in a fresh kernel (what it says can only lower the grade);
    then the judge's verdict, from a process the learner's code never runs in (judge.py)."""
    iso = isolation or Isolation()
    run = launch or Launch()
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
    cmd = [sys.executable, "-m", "perflab.classroom.runner", str(src), str(dst), str(work),
           json.dumps(asdict(limits)), str(cpu_s)]
    if iso.sandbox is not None:
        cmd = iso.sandbox.command(cmd, writable=[box, tmp], hidden=iso.hidden, cwd=tmp)
    t0 = time.monotonic()
    log = open(tmp / "runner.log", "wb")
    proc = run.start(cmd, cwd=tmp, env=run_env, log=log)
    try:
        proc.wait(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        run.stop(proc)
        log.close()
    rec.seconds = time.monotonic() - t0
    rec.predictions = read_predictions(results) if sub.lab.predicts else []
    from perflab.classroom.answer_source import MAX_NOTEBOOK_BYTES

    executed = read_left(dst, MAX_NOTEBOOK_BYTES + 2**20)  # a notebook's bound, and its outputs
    try:
        done = load_notebook(executed)[0] if executed is not None else None
    except Exception:  # the runner was killed while writing it
        done = None
    if timed_out:
        rec.outcome, rec.message = "timeout", f"still running after {timeout:g} s" + running_cell(done)
    elif done is None:
        rec.outcome, rec.message = "error", "the kernel could not run the notebook: " + last_line(tmp / "runner.log")
    else:
        rec.outcome, rec.message = classify(done, sub.lab)
        if rec.outcome == "error" and rec.message.startswith("the notebook stopped"):
            rec.message = f"{last_line(tmp / 'runner.log')} (memory or CPU-time limit?)"
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
    """The judge's (outcome, message) for `sub`: a fresh, trusted process (worker.trusted_python) that
    reads the snapshot of the submitted notebook, runs its answers in a confined worker and grades
    them with the lab's checks on inputs drawn from `secret` and the learner's name. Its answer
    carries a nonce only it was told."""
    from perflab.classroom import judge
    from perflab.classroom.worker import trusted_python

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
    proc = subprocess.Popen(trusted_python(judge.__file__, pycache=iso.pycache), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(json.dumps(job, ensure_ascii=False).encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        return "timeout", f"the grader's run of your answers took more than {timeout:.0f} s"
    finally:
        kill_tree(proc)
    for line in out.decode(errors="replace").splitlines():
        if line.startswith(nonce):
            try:
                got = json.loads(line[len(nonce):])
            except ValueError:
                break
            if got.get("outcome") in ("done", "not done", "wrong", "error"):
                return str(got["outcome"]), clean(str(got.get("message", "")))
    return "error", "the grader's run of your answers gave no verdict"

def kill_tree(proc: subprocess.Popen) -> None:
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


def _popen(cmd: list[str], *, cwd: Path, env: dict[str, str], log: Any) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


@dataclass(frozen=True)
class Launch:
    """How `grade_one` starts the runner process (`start(cmd, cwd=, env=, log=)`, returning what it
    waits on) and ends it with everything it started (`stop`). A test gives its own."""

    start: Callable[..., Any] = _popen
    stop: Callable[[Any], None] = kill_tree


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
    """RLIMIT_NPROC for the kernel and what it starts (see worker.nproc_limit)."""
    import resource

    from perflab.classroom.worker import nproc_limit

    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        cap = nproc_limit()
        resource.setrlimit(resource.RLIMIT_NPROC, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))


if __name__ == "__main__":  # the runner: python -m perflab.classroom.runner SRC DST CWD LIMITS CPU_S
    sys.exit(_run(*sys.argv[1:6]))

