"""The verdict of `perflab grade`, computed where the learner's code cannot reach it.

The learner's notebook still runs in a kernel of its own (gradebook.py), for its errors, its
timeout and its predictions; nothing that kernel prints or writes can make a grade `done`. The
verdict comes from here, a *judge* process that runs no learner code:

1. it reads the submitted notebook's source (not its outputs) and takes out the answers by name
   (answer_source.py): each name the lab lists in `LEARNER_ANSWERS`, with the top-level
   definitions, imports and assignments it needs, and nothing else (no measurement cell, no check
   call, no print);
2. it runs those definitions in a *worker* (`answer_worker.py`, started by worker.py): a fresh
   Python with resource limits, a bare environment, perflab's answer functions disarmed and an
   audit hook that ends it when the code reaches for the course's files, a solution, a fresh copy of
   an answer's module, another process or ctypes;
3. it runs the lab's own checks here (the `judge(answers, rng)` of each lab module), with each
   learner function replaced by a proxy that asks the worker to call it (answers.py): the checks'
   cases, then inputs drawn from a random seed the learner never sees (the grader's secret, the
   learner's name, the lab), compared here with perflab's references (`REFERENCES`); measured
   answers are compared with numbers this process measures itself;
4. the states of the checks, kept in this process's `grading` module, are the verdict.

A learner's function only ever sees its inputs: not the expected value, not the random seed, not the
checks. Monkeypatching perflab, `grading`, builtins or the checks in the notebook changes the
learner's kernel, which the verdict never reads.

    python -I -S -c BOOT PATHS judge.py < job.json  # (worker.trusted_python) prints one line: the nonce,
                                                    # then the verdict as JSON
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflab.classroom import answer_source
from perflab.classroom.answer_source import extract, lab_module_name, read_notebook
from perflab.classroom.answers import Answers
from perflab.classroom.worker import AnswerError, Confinement, Forbidden, Worker

if TYPE_CHECKING:
    from perflab.classroom.sandbox import Sandbox


# ----------------------------------------------------------------------------- one verdict
def learner_rng(secret: str, learner: str, lab: str) -> random.Random:
    """The grading inputs' generator: the grader's secret, the learner and the lab; never shipped."""
    seed = hashlib.sha256(f"{secret}\x00{learner}\x00{lab}".encode()).digest()
    return random.Random(int.from_bytes(seed[:8], "big"))


def verdict(submission: Mapping[str, Any], shipped: Mapping[str, Any], *, learner: str, secret: str,
            course_dirs: Sequence[str] = (), memory_bytes: int | None = 4 * 2**30, cpu_s: int = 600,
            threads: int = 1, sandbox: Sandbox | None = None, hidden: Sequence[str] = (),
            pycache: str | None = None, group: Sequence[str] = (),
            tmp_bytes: int | None = 512 * 2**20) -> tuple[str, str]:
    """(outcome, message) for one submission: 'done', 'not done', 'wrong' or 'error'. Every process
    started for the learner (its answer worker, a lab's ranks, a worker that checks what the
    learner's returned) is confined alike (`Confinement`: the sandbox, the cgroup whose
    `cgroup.procs` files `group` names, the limits)."""
    from perflab.grading import checks as grading
    from perflab.grading.checks import LabCheckError

    module = lab_module_name(shipped)
    if module is None:
        return "error", "the course's lab has no `from perflab.… import labNN as lab` line"
    lab = importlib.import_module(module)
    names = tuple(getattr(lab, "LEARNER_ANSWERS", ()))
    judge = getattr(lab, "judge", None)
    if not names or judge is None:
        return "error", f"{module} does not say how to grade it apart from the notebook (LEARNER_ANSWERS, judge)"
    code, preload, where = extract(submission, names)
    if not where:
        return "not done", "none of the answers is defined: " + ", ".join(names)
    confine = Confinement(sandbox, tuple(hidden), pycache, tuple(group), memory_bytes, cpu_s, threads, tmp_bytes)
    try:
        worker = Worker(code, preload, lab, course_dirs=course_dirs, learner=learner, confine=confine)
    except Forbidden as e:
        return "wrong", str(e)
    except AnswerError as e:
        return "error", str(e)
    answers = Answers(worker, names, where, code, submission, learner, lab=lab, confine=confine,
                      course_dirs=course_dirs)
    grading.reset()
    rng = learner_rng(secret, learner, module)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            judge(answers, rng)
    except Forbidden as e:
        return "wrong", str(e)
    except LabCheckError as e:
        return "wrong", _first(str(e))
    except AnswerError as e:
        return "error", _first(str(e))
    except NotImplementedError as e:
        return "not done", _first(str(e)) or "a function still raises NotImplementedError"
    except Exception as e:  # noqa: BLE001 - a check that failed on what the learner's function returned
        return "error", f"{type(e).__name__}: {_first(str(e))}"
    finally:
        worker.close()
    return outcome_of(dict(grading.summary()))


def outcome_of(states: Mapping[str, str]) -> tuple[str, str]:
    """(outcome, message) from the judge's checks' states: done only when every check passed; a check
    left inconclusive by a busy machine is no verdict either way, so the learner is 'not done' with a
    message that says to grade again when the machine is quiet."""
    if not states:
        return "not done", "no check ran"
    todo = [k for k, v in states.items() if v != "passed"]
    if todo and all(states[k] == "inconclusive" for k in todo):
        return "not done", (f"inconclusive: {', '.join(todo)} measured while the machine was busy; grade again "
                            "when it is quiet")
    if todo:
        return "not done", f"{len(todo)} of {len(states)} checks not done: {', '.join(todo)}"
    return "done", f"{len(states)} check{'s' if len(states) != 1 else ''} passed, graded apart from the notebook"


def _first(text: str) -> str:
    text = str(text).strip()
    return text.splitlines()[0].strip()[:300] if text else ""


# ----------------------------------------------------------------------------- the judge process
def _limit_memory(memory_bytes: Any) -> None:
    """The judge's own address space: the learner's memory limit (its own measurements fit in it, as
    the same ones fit in the learner's kernel)."""
    import resource

    if not isinstance(memory_bytes, int) or memory_bytes <= 0:
        return
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        top = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (top, hard))


def main() -> int:
    from perflab.classroom.sandbox import Sandbox, protect

    protect()
    raw = sys.stdin.buffer.read(answer_source.MAX_NOTEBOOK_BYTES * 8 + 2**20)  # the notebook, JSON-escaped
    job = json.loads(raw)
    _limit_memory(job.get("memory_bytes"))  # the learner's notebook is parsed under a limit
    try:
        sub, shipped = read_notebook(job["notebook"]), read_notebook(Path(job["shipped"]).read_bytes())
        tool = job.get("sandbox")
        outcome, message = verdict(sub, shipped, learner=job["learner"], secret=job["secret"],
                                   course_dirs=job.get("course_dirs", ()), memory_bytes=job.get("memory_bytes"),
                                   cpu_s=int(job.get("cpu_s", 600)), threads=int(job.get("threads", 1)),
                                   sandbox=Sandbox(tool) if tool else None, hidden=job.get("hidden", ()),
                                   pycache=job.get("pycache"), group=job.get("group", ()),
                                   tmp_bytes=job.get("tmp_bytes"))
    except (ValueError, RecursionError) as e:
        outcome, message = "error", f"malformed notebook ({_first(str(e))[:160]})"
    except MemoryError:
        outcome, message = "error", "the notebook is too large to read within the learner's memory limit"
    except Exception as e:  # noqa: BLE001 - the judge's own failure: an error grade that says so
        outcome, message = "error", f"the grader failed: {type(e).__name__}: {_first(str(e))}"
    out = sys.__stdout__ or sys.stdout
    out.write(job["nonce"] + json.dumps({"outcome": outcome, "message": message}) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
