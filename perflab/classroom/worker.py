"""The judge's side of the answer worker: the confined process in which a learner's answers run.

`Worker(code, preload, lab, confine=Confinement(...))` starts `answer_worker.py` (WORKER_SOURCE, run
as a script by a trusted Python: `trusted_python`) in the learner's cgroup, inside the sandbox where
there is one (its only writable place a private, sized /tmp: nothing of it outlives it on the
grader's disk), with a bare environment; it sends the limits the worker sets on itself, the
learner's definitions and what to disarm (`forbidden_of`: the lab's FORBIDDEN, its REFERENCES and
its own functions), then `call`s the learner's functions and reads `value`s on inputs the judge
chose. Answers come back as JSON, bounded in bytes and values (`decode`), never as code; what the
worker prints reaches the judge through a pipe, its last 64 KiB kept. How the worker ended names
what the learner's code did (`Forbidden`, `AnswerError`). A worker with no learner code (`code=""`)
runs perflab's own functions on data the learner's worker returned (`run`): a process that never
ran learner code.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import pickle
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflab.classroom.boxes import Tail, remove_tree
from perflab.classroom.cgroup import JOIN

if TYPE_CHECKING:
    from perflab.classroom.sandbox import Sandbox

WORKER_SOURCE = Path(__file__).with_name("answer_worker.py")
MAX_ANSWER_BYTES = 16 * 2**20  # one answer, as JSON
MAX_ANSWER_ITEMS = 2**21  # numbers in one answer (a tensor's, a list's)
BOOT = ("import os, sys, runpy; sys.argv.pop(0); sys.path[:0] = sys.argv.pop(0).split(os.pathsep); "
        "runpy.run_path(sys.argv[0], run_name='__main__')")
EXIT_FORBIDDEN, EXIT_BLOCKED = 100, 90
BLOCKED_WHY = {
    EXIT_BLOCKED: "your answer opened a file of the course (a lab, a solution or perflab's answer); write the "
                  "computation yourself",
    EXIT_BLOCKED + 1: "your answer imported a module that holds perflab's answer; write the computation yourself",
    EXIT_BLOCKED + 2: "your answer reached outside itself (another process, a signal, the garbage collector, "
                      "ctypes or the tracer); an answer computes its result from its inputs",
}


class AnswerError(Exception):
    """The learner's function raised (an `error` grade): the message says what."""


class Forbidden(Exception):
    """The learner's code did what an answer may not (a `wrong` grade): the message says what."""


class NotAnswered(Exception):
    """A value the lab needs is not defined at the top level of the notebook (a `not done` grade)."""


def _qualified(fn: Any) -> tuple[str, str] | None:
    """(module, qualified name) of a function or class that a worker can find again by name; a
    module: (its name, '*'), every function and class defined in it; a (module, qualified name) pair
    names one without importing it (another topic's lab)."""
    if isinstance(fn, tuple) and len(fn) == 2 and all(isinstance(x, str) for x in fn):
        return (fn[0], fn[1]) if fn[0].startswith(ANSWER_PACKAGES) else None
    if inspect.ismodule(fn):
        return fn.__name__, "*"
    fn = inspect.unwrap(fn) if callable(fn) else fn
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not mod or not qual or not mod.startswith(ANSWER_PACKAGES) or "<" in qual:
        return None
    return mod, qual


ANSWER_PACKAGES = ("perflab.", "torch.utils.flop_counter", "torch.distributed._tools")


def forbidden_of(lab: Any) -> list[tuple[str, str]]:
    """What the worker disarms: the lab's FORBIDDEN, its REFERENCES, and every function of the lab
    module itself except the helpers its notebook is meant to call (`HELPERS`)."""
    helpers = set(getattr(lab, "HELPERS", ()))
    found: list[Any] = list(getattr(lab, "FORBIDDEN", ())) + list(getattr(lab, "REFERENCES", {}).values())
    for name, obj in vars(lab).items():
        if inspect.isfunction(obj) and obj.__module__ == lab.__name__ and name not in helpers:
            found.append(obj)
    out = []
    for f in found:
        q = _qualified(f)
        if q is not None and q not in out:
            out.append(q)
    return out


@dataclass(frozen=True)
class Reply:
    """One message of the worker, read from its JSON: its definitions ran (`ok`), a function's
    `value` (still in its JSON form: `decode`), `not_done` (the function raised NotImplementedError)
    or the `error` it raised."""

    ok: bool = False
    value: Any = None
    not_done: bool = False
    error: str | None = None

    @classmethod
    def from_json(cls, obj: Any) -> Reply:
        if not isinstance(obj, dict):
            raise AnswerError("the answer's process wrote something that is not an answer")
        return cls(ok=bool(obj.get("ok")), value=obj.get("value"), not_done=bool(obj.get("not_done")),
                   error=str(obj["error"]) if "error" in obj else None)


@dataclass(frozen=True)
class Confinement:
    """How the judge starts a process for a learner (its answer worker, a lab's ranks): inside the
    sandbox where there is one (`hidden` covered, `tmp_bytes` for its /tmp and /dev/shm), in the
    learner's cgroup (`group`: the `cgroup.procs` files it joins before anything runs), under the
    per-process limits it sets on itself (`memory_bytes`, `cpu_s`), `threads` threads."""

    sandbox: Sandbox | None = None
    hidden: tuple[str, ...] = ()
    pycache: str | None = None
    group: tuple[str, ...] = ()
    memory_bytes: int | None = 4 * 2**30
    cpu_s: int = 600
    threads: int = 1
    tmp_bytes: int | None = 512 * 2**20

    def wrap(self, cmd: list[str], *, readable: Iterable[Path | str] = (), cwd: str | None = None,
             dirs: Iterable[str] = (), perflab: bool = True) -> list[str]:
        """`cmd` confined: sandboxed where there is a sandbox, then joined to the learner's cgroup."""
        if self.sandbox is not None:
            cmd = self.sandbox.command(cmd, readable=readable, hidden=self.hidden, cwd=cwd, dirs=dirs,
                                       perflab=perflab, tmp_bytes=self.tmp_bytes)
        if self.group:
            cmd = ["/bin/sh", "-c", JOIN, "perflab-join", str(len(self.group)), *self.group, *cmd]
        return cmd

    def limits(self) -> dict[str, int | None]:
        """The per-process limits a confined process sets on itself before it runs anything else."""
        return {"as": self.memory_bytes, "cpu": self.cpu_s, "fsize": 64 * 2**20, "core": 0, "nproc": nproc_limit()}


WORK_DIR = "/tmp/w/w"  # a confined worker's working folder, in its private /tmp (the one above holds nothing)


class Worker:
    """The learner's definitions, alive in a confined process; `call` and `value` ask it."""

    def __init__(self, code: str, preload: Sequence[str], lab: Any, *, course_dirs: Sequence[str] = (),
                 learner: str = "learner", confine: Confinement | None = None):
        confine = confine or Confinement()
        forbidden = forbidden_of(lab)
        readable = set(getattr(lab, "READABLE", ()))  # modules whose source the tracer may read (lab 10)
        blocked_modules = sorted(({m for m, _ in forbidden} | {lab.__name__}) - readable)
        self.box: str | None = None
        if confine.sandbox is not None:  # its own folders in its private /tmp: nothing on the grader's disk
            home, cwd, host_cwd = "/tmp/w", WORK_DIR, None
        else:
            self.box = tempfile.mkdtemp(prefix="perflab-answers-")
            home = self.box
            host_cwd = cwd = str(Path(self.box) / "w" / "w")  # its own folder, and the one above, hold nothing
            Path(cwd).mkdir(parents=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "TMPDIR": "/tmp" if self.box is None
               else home, "LANG": "C.UTF-8", "OMP_NUM_THREADS": str(confine.threads),
               "MKL_NUM_THREADS": str(confine.threads), "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
               "PERFLAB_LEARNER": learner}
        self.err = Tail(64 * 2**10)  # what it prints: a pipe, its last 64 KiB kept
        cmd = trusted_python(WORKER_SOURCE, pycache=confine.pycache)
        cmd.insert(1, "-B")  # it reads the grader's bytecode cache, never writes to it
        cmd = confine.wrap(cmd, readable=[confine.pycache] if confine.pycache else [], cwd=cwd,
                           dirs=["/tmp/w", WORK_DIR] if self.box is None else [])
        self.proc = subprocess.Popen(cmd, cwd=host_cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err.fd, start_new_session=True)
        self.err.close_writer()
        from perflab.classroom.sandbox import python_path

        loads = [*preload, *(f"import {m}" for m in getattr(lab, "PRELOAD", ())), f"import {lab.__name__}",
                 *(f"import {m}" for m in blocked_modules)]
        keep = [q for q in (_qualified(getattr(lab, h, None)) for h in getattr(lab, "HELPERS", ())) if q]
        self._send({"paths": python_path(), "limits": confine.limits(), "seccomp": confine.sandbox is not None,
                    "preload": loads, "keep": keep, "forbidden": forbidden, "blocked_dirs": list(course_dirs),
                    "blocked_files": [], "blocked_modules": blocked_modules, "code": code})
        self.forbidden = forbidden
        self.stderr_tail = ""
        first = self._receive()
        if not first.ok:
            self.close()
            raise AnswerError(f"the notebook's definitions failed outside the kernel: {first.error}")

    def _send(self, obj: Any) -> None:
        data = pickle.dumps(obj)
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(struct.pack(">I", len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._ended()

    def _receive(self) -> Reply:
        assert self.proc.stdout is not None
        head = self.proc.stdout.read(4)
        if len(head) < 4:
            self._ended()
        (n,) = struct.unpack(">I", head)
        if n > MAX_ANSWER_BYTES:
            raise AnswerError(f"your function returned more than {MAX_ANSWER_BYTES // 2**20} MiB")
        data = self.proc.stdout.read(n)
        try:
            return Reply.from_json(json.loads(data))
        except ValueError:
            raise AnswerError("the answer's process wrote something that is not an answer") from None

    def _ended(self):
        code = self.proc.wait()
        self.stderr_tail = self.err.text()[-2000:]
        self.close()
        if code is not None and EXIT_FORBIDDEN <= code < EXIT_FORBIDDEN + 100:
            i = code - EXIT_FORBIDDEN
            what = (".".join(self.forbidden[i]) if i < min(len(self.forbidden), 99) else
                    "formulas (a function from one of its tables: the lab's own answers or mistakes)")
            raise Forbidden(f"your answer calls perflab's {what}, which computes the answer; write the computation "
                            "out yourself")
        if code in BLOCKED_WHY:
            at = [ln for ln in self.stderr_tail.splitlines() if ln.startswith("perflab grade: stopped at ")]
            raise Forbidden(BLOCKED_WHY[code] + (f" ({at[-1][len('perflab grade: '):][:160]})" if at else ""))
        raise AnswerError(f"the answer's process ended (exit status {code}) while your function ran: it must return "
                          "its answer, not end the program")

    def ask(self, kind: str, name: str, args: tuple = (), kwargs: dict | None = None) -> Any:
        self._send((kind, name, tuple(args), dict(kwargs or {})))
        reply = self._receive()
        if reply.not_done:
            raise NotImplementedError(name)
        if reply.error is not None:
            raise AnswerError(f"{name}: {reply.error}")
        return decode(reply.value)

    def call(self, name: str, *args, **kwargs) -> Any:
        return self.ask("call", name, args, kwargs)

    def value(self, name: str) -> Any:
        return self.ask("get", name)

    def run(self, probe: str, *args, **kwargs) -> Any:
        """perflab's `module:function` called in the worker on `args` (no learner object)."""
        return self.ask("run", "", (probe, *args), kwargs)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, 9)
                self.proc.wait()
        self.err.close_writer()
        if self.box is not None:
            remove_tree(self.box)
            self.box = None


def decode(x: Any, _count: list[int] | None = None) -> Any:
    """An answer back from its JSON form (see answer_worker._encode), at most MAX_ANSWER_ITEMS values."""
    count = _count if _count is not None else [0]
    count[0] += 1
    if count[0] > MAX_ANSWER_ITEMS:
        raise AnswerError(f"an answer of more than {MAX_ANSWER_ITEMS} values, which the grader does not read")
    if isinstance(x, list):
        return [decode(v, count) for v in x]
    if not isinstance(x, dict):
        return x
    if "__float__" in x:
        return float(x["__float__"])
    if "__seq__" in x:
        items = [decode(v, count) for v in _list(x.get("items"))]
        return tuple(items) if x["__seq__"] == "tuple" else items
    if "__dict__" in x:
        return {_hashable(decode(k, count)): decode(v, count) for k, v in _list(x["__dict__"])}
    if "__tensor__" in x or "__array__" in x:
        data, shape = decode(x.get("data"), count), [int(s) for s in _list(x.get("shape"))]
        size = 1
        for s in shape:
            size *= s if s >= 0 else -1
        if not isinstance(data, list) or len(shape) > 32 or size != len(data):
            raise AnswerError("an answer the grader cannot read (its shape and its values disagree)")
        if "__tensor__" in x:
            import torch

            dtype = getattr(torch, str(x["__tensor__"]), None)
            if not isinstance(dtype, torch.dtype):
                raise AnswerError(f"a tensor of an unknown dtype {str(x['__tensor__'])[:40]!r}")
            return torch.tensor(data, dtype=dtype).reshape(shape)
        import numpy as np

        try:
            dt = np.dtype(str(x["__array__"]))
        except TypeError:
            dt = None
        if dt is None or dt.kind not in "biufc":
            raise AnswerError(f"an array of a dtype the grader does not read back ({str(x['__array__'])[:40]!r})")
        return np.array(data, dtype=dt).reshape(shape)
    raise AnswerError("an answer the grader cannot read")


def _list(x: Any) -> list:
    if not isinstance(x, list):
        raise AnswerError("an answer the grader cannot read")
    return x


def _hashable(x: Any) -> Any:
    return tuple(_hashable(v) for v in x) if isinstance(x, list) else x


def nproc_limit() -> int:
    """A cap on the processes of this user (RLIMIT_NPROC) that leaves room for what runs now; a
    root grader's processes are exempt from it (the sandbox's PID namespace still ends them all)."""
    try:
        import psutil

        uid = os.getuid()
        mine = sum(1 for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid)
    except Exception:  # noqa: BLE001 - no process table to count: a generous cap
        mine = 4096
    return mine + 512



def trusted_python(script: Path | str, *, pycache: str | None = None) -> list[str]:
    """The command that runs `script` in a Python that reads nothing a learner could have planted:
    isolated (`-I`: no environment variables, no user site), without site-packages' `.pth` files
    (`-S`: the trusted folders are put on its path by hand), with a bytecode cache of the grader's
    own (`-X pycache_prefix`) or none."""
    from perflab.classroom.sandbox import python_path

    cache = ["-X", f"pycache_prefix={pycache}"] if pycache else ["-B"]
    return [sys.executable, "-I", "-S", *cache, "-c", BOOT, os.pathsep.join(python_path()), str(script)]

