"""One submission graded: its notebook run in a fresh, confined kernel, then the judge's verdict.

    rec = grade_one(sub, timeout=300, limits=Limits(), isolation=Isolation(find(), hidden, cache, cgroups))

`grade_one` runs the submission:
* in a cgroup of its own where one can be made (cgroup.py: the memory of all its processes with
  their children, tmpfs and page cache; their number, a root grader's included; their CPU), which
  the judge's worker and ranks for that learner join too; else under per-process limits only, and
  every report says so;
* confined by the operating system (sandbox.py, bubblewrap) where `isolation` has a sandbox: only
  what the code needs in view, a private, sized /tmp and /dev/shm, its own PID and network
  namespaces, an environment from an allowlist (`learner_env`), the keyring calls refused (seccomp.py);
* in a copy, in a folder of its own (boxes.py: a sized tmpfs, the learner's disk quota, where the
  grader may mount one), never in the learner's folder;
* in a fresh kernel under papermill (smoke sizes, as the test suite runs the labs), started by the
  runner process (`python -m perflab.classroom.runner SRC DST CWD LIMITS CPU_S`), which parses the
  submission itself, inside those limits: a notebook built to exhaust a parser is that learner's
  error, never the grader's;
* with a wall-clock timeout for the whole notebook (the kernel and its children are killed);
* under resource limits that its kernel inherits from the runner (`Limits`: address space, or the
  data segment on an NVIDIA box, where CUDA reserves a huge address space; CPU time; the size of a
  written file; processes);
* with its own `PERFLAB_RESULTS` folder, from which the learner's predictions are read for a lab that
  asks for them.

What that run leaves can only lower the grade, and is parsed in a limited process (evidence.py).
The grade itself is the judge's (`run_judge`: a trusted process, judge.py), and the `Record` holds
both. Whatever goes wrong in one learner's grading is that learner's `error` record: `grade_one`
never raises, and what the learner left is removed without recursion (boxes.py).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perflab.classroom.boxes import Box, Tail
from perflab.classroom.cgroup import Cgroups, Group
from perflab.classroom.evidence import (
    GRADE_CELL,
    MARK,
    examine,
    last_line,
    load_notebook,
    need_papermill,
)
from perflab.classroom.sandbox import Sandbox, learner_env
from perflab.classroom.shown import clean, first_line, visible
from perflab.classroom.submissions import Submission, snapshot
from perflab.core.jsonable import JSON


@dataclass
class Limits:
    """What one learner's processes may use; None leaves a limit as it is. `memory_bytes` caps each
    process's address space and, where a cgroup can be made, all of the learner's processes
    together (children, tmpfs and page cache included); `processes` caps the learner's processes
    and threads (cgroup), else the grading user's (RLIMIT_NPROC, which does not bind root);
    `tmp_bytes` sizes each of the sandbox's /tmp and /dev/shm; `disk_bytes` the learner's folder."""

    memory_bytes: int | None = 4 * 2**30
    cpu_s: int | None = None  # default: twice the timeout (a kernel may use more than one core)
    file_bytes: int | None = 2**30
    processes: int | None = 512
    tmp_bytes: int | None = 512 * 2**20
    disk_bytes: int | None = 2**30

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
    folders hidden from them, the grader's own bytecode cache (for the judge and the worker), and
    the grading's cgroups (None: per-process limits only)."""

    sandbox: Sandbox | None = None
    hidden: tuple[str, ...] = ()
    pycache: str | None = None
    cgroups: Cgroups | None = None


_LEARNERS = itertools.count()  # a learner's cgroup is named by its turn, never by its (learner-chosen) name
EXIT_MALFORMED = 3  # the runner's status when the submission is not a notebook it can run


def grade_one(sub: Submission, *, timeout: float, limits: Limits, threads: int = 1,
              env: dict[str, str] | None = None, secret: str | None = None,
              isolation: Isolation | None = None, launch: Launch | None = None) -> Record:
    """Run one submission in a copy, in a fresh kernel (what it says can only lower the grade);
    then the judge's verdict, from a process the learner's code never runs in (judge.py). Never
    raises: whatever fails is this learner's `error` record."""
    rec = Record(visible(sub.learner), sub.lab.name, "error", notebook=visible(str(sub.path)))
    t0 = time.monotonic()
    iso = isolation or Isolation()
    group: Group | None = None
    try:
        if iso.cgroups is not None:
            group = iso.cgroups.learner(next(_LEARNERS), memory_bytes=limits.memory_bytes,
                                        processes=limits.processes, cpus=threads)
            if group is None:
                rec.message = "the grader could not make this learner's cgroup (its limits): not graded"
                return rec
        _grade(rec, sub, timeout=timeout, limits=limits, threads=threads, env=env, secret=secret, iso=iso,
               run=launch or Launch(), group=group, t0=t0)
    except Exception as e:  # noqa: BLE001 - one learner's failure is that learner's record, never the class's
        rec.outcome = "error"
        rec.message = f"the grader failed on this notebook: {type(e).__name__}: {first_line(str(e))}"
    finally:
        if group is not None:
            group.close()
        rec.seconds = time.monotonic() - t0
        rec.message = clean(rec.message)
    return rec


def _grade(rec: Record, sub: Submission, *, timeout: float, limits: Limits, threads: int, env: dict[str, str] | None,
           secret: str | None, iso: Isolation, run: Launch, group: Group | None, t0: float) -> None:
    if sub.refused:
        rec.message = sub.refused
        return
    if sub.data is None:
        snapshot([sub], sub.path.parent)
        if sub.refused or sub.data is None:
            rec.message = sub.refused or "cannot read the notebook"
            return
    # one sized tmpfs (where the grader may mount one) holds the submission's own folder (its copy,
    # its working directory, its results, its home) and, apart from it, out of reach of relative
    # paths, the grader's (the executed notebook)
    box = Box.make("perflab-grade-", limits.disk_bytes)
    try:
        work, results, home, out = (box.path / d for d in ("learner/work", "learner/results", "learner/home", "grader"))
        for d in (work, results, home, out):
            d.mkdir(parents=True)
        src, dst = work / _safe_name(sub.path.name), out / "executed.ipynb"
        src.write_bytes(sub.data)  # the bytes read before any learner's code ran; the runner parses them
        run_env = learner_env(env, PERFLAB_RESULTS=str(results), OMP_NUM_THREADS=str(threads),
                              MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1", PERFLAB_LEARNER=sub.learner,
                              HOME=str(home), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
                              IPYTHONDIR=str(home / "ipython"), MPLCONFIGDIR=str(home / "mpl"),
                              TMPDIR="/tmp" if iso.sandbox is not None else str(out))
        cpu_s = int(limits.cpu_s or max(60, 2 * timeout * threads))
        cmd = [sys.executable, "-m", "perflab.classroom.runner", str(src), str(dst), str(work),
               json.dumps(asdict(limits)), str(cpu_s)]
        if iso.sandbox is not None:
            cmd = iso.sandbox.command(cmd, writable=[box.path], hidden=iso.hidden, cwd=out, tmp_bytes=limits.tmp_bytes)
        if group is not None:
            cmd = group.wrap(cmd)
        log = Tail(2**20)  # the runner's and kernel's output: a pipe, its last MiB kept (no file to fill)
        with os.fdopen(os.dup(log.fd), "wb", buffering=0) as writer:
            log.close_writer()
            proc = run.start(cmd, cwd=out, env=run_env, log=writer)
        try:
            proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            run.stop(proc)
            if group is not None:
                group.kill()
        text = log.text()
        rec.seconds = time.monotonic() - t0
        if getattr(proc, "returncode", None) == EXIT_MALFORMED:  # the runner's own word, before any kernel ran
            said = [ln[len(MARK):] for ln in text.splitlines() if ln.startswith(MARK + "malformed")]
            rec.outcome, rec.message = "error", (said[-1] if said else "malformed notebook")
            return
        ev = examine(dst, results if sub.lab.predicts else None, sub.lab.checks,
                     wrap=group.wrap if group is not None else None)
        rec.predictions = ev.predictions
        over = group is not None and group.hit_memory_limit()
        if timed_out:
            rec.outcome, rec.message = "timeout", f"still running after {timeout:g} s" + ev.running
        elif ev.outcome is None:
            rec.outcome, rec.message = "error", "the kernel could not run the notebook: " + last_line(text)
            if over:
                rec.message += f" ({MEMORY_LIMIT})"
        else:
            rec.outcome, rec.message = ev.outcome, ev.message
            if rec.outcome == "error" and rec.message.startswith("the notebook stopped"):
                rec.message = f"{last_line(text)} ({MEMORY_LIMIT if over else 'memory or CPU-time limit?'})"
    finally:
        box.close()  # before the judge: a tmpfs's pages leave the learner's memory
    if rec.outcome == "ran":
        rec.outcome, rec.message = run_judge(sub, secret=secret or secrets.token_hex(16), timeout=timeout,
                                             limits=limits, threads=threads, env=env, isolation=iso, group=group)


MEMORY_LIMIT = "the learner's processes reached their memory limit, children and tmpfs included"


def _safe_name(name: str) -> str:
    """A file name for the submission's copy: its own, without anything a path or a shell would read."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(name).stem).strip("._") or "submission"
    return stem[:80] + ".ipynb"


def run_judge(sub: Submission, *, secret: str, timeout: float, limits: Limits, threads: int = 1,
              env: dict[str, str] | None = None, isolation: Isolation | None = None,
              group: Group | None = None) -> tuple[str, str]:
    """The judge's (outcome, message) for `sub`: a fresh, trusted process (worker.trusted_python) that
    reads the snapshot of the submitted notebook, runs its answers in a confined worker and grades
    them with the lab's checks on inputs drawn from `secret` and the learner's name. Its answer
    carries a nonce only it was told. The judge runs outside the learner's cgroup (its own
    measurements are not throttled), under an address-space limit it sets itself before it reads
    the notebook; every process it starts for the learner joins `group`."""
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
           "pycache": iso.pycache, "group": group.procs_files() if group is not None else [],
           "tmp_bytes": limits.tmp_bytes}
    env = learner_env(env, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
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
    """In the runner process, before any learner code: the limits (the kernel inherits them), the
    keyring calls refused (seccomp), the submission parsed and the grader's last cell added; then
    papermill."""
    Limits(**json.loads(limits_json)).apply(int(cpu_s))
    _cap_processes()
    from perflab.classroom import seccomp

    if not seccomp.supported():
        seccomp.install()
    with open(src, "rb") as f:
        data = f.read()
    _, nbformat = need_papermill(alone=True)
    nb, why = load_notebook(data)
    if nb is None:
        print(MARK + why, flush=True)
        return EXIT_MALFORMED
    nb.cells.append(nbformat.v4.new_code_cell(GRADE_CELL))
    nbformat.write(nb, src)
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

