"""Grade a class's labs: every submitted lab notebook run in a fresh kernel, one gradebook.

    book = grade_folder("submissions/", labs=["01", "07"], timeout=300, jobs=2)
    book.write_csv("gradebook.csv"); print(book.summary())

The class's labs and submissions are found and every submission's bytes read first, before any
learner's code runs (submissions.py). Each submission then runs in a confined, fresh kernel, and
gets the judge's verdict (runner.py, judge.py): without bubblewrap grading stops in one line unless
`isolate=False` (`--no-sandbox`), and then every report says that the grades are not isolated.
Each learner's processes share one cgroup (cgroup.py) where the machine lets the grader make one;
where it does not, the limits are per process, and every report says that too. Submissions run N
at a time, at most one per core, each kernel's threads sharing the cores. A learner's failure,
crash or timeout is that learner's record: grading a class always ends with its gradebook.

That run can only lower a grade: its first error output (`wrong` for a check's LabCheckError,
`error` otherwise), a kernel that died before the grader's last cell, a deleted check cell (`not
done`), a timeout (evidence.py). Nothing it prints or writes can raise one. The grade itself is the
judge's (perflab/classroom/judge.py): a separate, trusted process that reads the submission's
snapshot, runs the learner's answer functions in a confined worker on inputs drawn from a per-run
secret and the learner's name, and compares them with perflab's references in its own process.
Outcomes: `done` (every check passed, on the grading inputs too), `not done`, `wrong` (the check's
message), `error` (an exception's first line; a malformed notebook; a kernel that died), `timeout`.
Everything printed is cleaned of control characters; a CSV cell a spreadsheet would run as a
formula is quoted.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from perflab.classroom.evidence import need_papermill
from perflab.classroom.runner import Isolation, Limits, Record, grade_one
from perflab.classroom.shown import clean, first_line, visible
from perflab.classroom.submissions import (
    Lab,
    Submission,
    course_labs,
    find_submissions,
    match_lab,
    pick_labs,
    snapshot,
)
from perflab.core.errors import InputError
from perflab.core.jsonable import JSON

# the names callers have always found here (perflab grade, tools/bench_grade.py)
__all__ = ["OUTCOMES", "Gradebook", "Isolation", "Lab", "Limits", "Record", "Submission", "clean", "course_labs",
           "find_submissions", "grade_folder", "grade_one", "hidden_from_learners", "match_lab", "pick_labs",
           "spreadsheet_safe", "usable_cores", "warm_cache"]

OUTCOMES = ("done", "not done", "wrong", "error", "timeout")


@dataclass
class Gradebook:
    """A class graded: one record per learner and lab, the labs, the notebooks not graded (one line
    each), how long it took, how many ran at a time, the timeout, and whether they were isolated."""

    records: list[Record]
    labs: list[str]
    notes: list[str]
    seconds: float
    jobs: int
    timeout: float
    isolated: bool = True  # each learner's processes confined by the sandbox (False: --no-sandbox)
    limits: str = ""  # what each learner's processes could use together, in words
    grouped: bool = True  # the limits hold for all of a learner's processes together (a cgroup each)

    def as_dict(self) -> JSON:
        """The gradebook as `perflab grade --json` prints it (predictions included)."""
        return {"labs": self.labs, "jobs": self.jobs, "timeout_s": self.timeout, "seconds": round(self.seconds, 1),
                "isolated": self.isolated, **({} if self.isolated else {"warning": NOT_ISOLATED}),
                "limits": self.limits, "limits_per_learner": self.grouped,
                "unmatched": self.notes, "records": [dict(asdict(r), seconds=round(r.seconds, 1)) for r in self.records],
                "passed": self.passed()}

    def passed(self) -> dict[str, int]:
        return {lab: sum(1 for r in self.records if r.lab == lab and r.outcome == "done") for lab in self.labs}

    def csv_text(self) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=[*Record("", "", "").row(), "isolated", "limits"])
        w.writeheader()
        for r in self.records:
            w.writerow({k: spreadsheet_safe(v) for k, v in {**r.row(), "isolated": "yes" if self.isolated else
                                                             "NO (--no-sandbox)",
                                                             "limits": "per learner" if self.grouped else
                                                             "PER PROCESS ONLY"}.items()})
        return buf.getvalue()

    def write_csv(self, path: Path | str) -> None:
        Path(path).write_text(self.csv_text())

    def summary(self, width: int = 100) -> str:
        learners = sorted({r.learner for r in self.records})
        lines = [f"Graded {_count(len(self.records), 'notebook')} of {_count(len(learners), 'learner')} in {self.seconds:.0f} s "
                 f"({self.jobs} at a time, timeout {self.timeout:g} s each)"]
        if not self.isolated:
            lines.append(NOT_ISOLATED)
        if self.limits:
            lines.append(("Limits: " if self.grouped else "") + self.limits)
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
PER_PROCESS = ("PER-PROCESS LIMITS ONLY: no cgroup could be made here ({why}), so a learner's processes together "
               "could use more than the memory limit, and with a root grader a fork bomb was stopped only by its timeout")
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
    from perflab.classroom.boxes import can_mount
    from perflab.classroom.cgroup import Cgroups, why

    groups = Cgroups.make()
    iso = Isolation(box, tuple(str(p) for p in hidden_from_learners(root, chosen)), cache, groups)
    try:
        warm_cache(cache, chosen)

        def one(sub: Submission) -> Record:
            try:
                rec = grade_one(sub, timeout=timeout, limits=limits, threads=threads, secret=secret, isolation=iso)
            except Exception as e:  # noqa: BLE001 - one learner's failure never stops the class
                rec = Record(visible(sub.learner), sub.lab.name, "error", clean(
                    f"the grader failed on this notebook: {type(e).__name__}: {first_line(str(e))}"),
                    notebook=visible(str(sub.path)))
            if on_record is not None:
                with contextlib.suppress(Exception):
                    on_record(rec)
            return rec

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            records = list(pool.map(one, subs))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        if groups is not None:
            groups.close()
    records.sort(key=lambda r: (r.learner, r.lab))
    return Gradebook(records, [lab.name for lab in chosen.values()], [clean(n) for n in notes],
                     time.monotonic() - t0, jobs, timeout, isolated=box is not None,
                     limits=describe_limits(limits, threads, groups, why() if groups is None else "",
                                            sandboxed=box is not None, quota=can_mount()),
                     grouped=groups is not None)


def describe_limits(limits: Limits, threads: int, groups: Any, why: str, *, sandboxed: bool, quota: bool) -> str:
    """What each learner's processes could use, in one line (the summary's, the JSON's)."""
    gib = lambda b: f"{b / 2**30:.1f} GiB"  # noqa: E731
    parts = []
    if limits.memory_bytes:
        parts.append(f"memory {gib(limits.memory_bytes)}" + (" with its children, tmpfs and page cache" if groups
                                                              else " per process"))
    if limits.processes:
        parts.append(f"{limits.processes} processes and threads" if groups else "processes: RLIMIT_NPROC (not for root)")
    parts.append(f"{threads} CPU{'s' if threads != 1 else ''}" if groups else "CPU time per process")
    if sandboxed and limits.tmp_bytes:
        parts.append(f"/tmp and /dev/shm {limits.tmp_bytes / 2**20:.0f} MiB each")
    if limits.disk_bytes and quota:
        parts.append(f"its folder {gib(limits.disk_bytes)} (a tmpfs)")
    elif limits.file_bytes:
        parts.append(f"no disk quota (this user cannot mount a tmpfs): {gib(limits.file_bytes)} a file")
    text = ", ".join(parts)
    if groups is None:
        return PER_PROCESS.format(why=why or "no cgroup filesystem") + f" ({text})"
    return f"each learner in its own cgroup ({groups.version}): {text}"


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
    from perflab.classroom.answer_source import lab_module_name, read_notebook
    from perflab.classroom.worker import trusted_python

    modules = ["torch", "numpy", "perflab.grading.checks", "perflab.classroom.sandbox", "perflab.classroom.answer_source",
               "perflab.classroom.worker", "perflab.classroom.answers"]
    for lab in labs.values():
        try:
            name = lab_module_name(read_notebook(lab.path.read_bytes()))
        except (OSError, ValueError):
            name = None
        if name:
            modules.append(name)
    code = "import importlib\nfor m in %r:\n    try:\n        importlib.import_module(m)\n    except Exception:\n        pass\n"
    script = Path(cache) / "warm.py"
    script.write_text(code % modules)
    with contextlib.suppress(subprocess.TimeoutExpired, OSError):
        subprocess.run([*trusted_python(script, pycache=cache)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)


def _count(n: int, noun: str) -> str:
    """'1 notebook', '3 notebooks'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
