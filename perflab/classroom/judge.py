"""The verdict of `perflab grade`, computed where the learner's code cannot reach it.

The learner's notebook still runs in a kernel of its own (gradebook.py), for its errors, its
timeout and its predictions; nothing that kernel prints or writes can make a grade `done`. The
verdict comes from here, a *judge* process that runs no learner code:

1. it reads the submitted notebook's source (not its outputs) and takes out the answers by name:
   each name the lab lists in `LEARNER_ANSWERS`, with the top-level definitions, imports and assignments it
   needs, and nothing else (no measurement cell, no check call, no print);
2. it runs those definitions in a *worker* (`answer_worker.py`): a fresh Python with resource
   limits, a bare environment, perflab's answer functions disarmed and an audit hook that ends it
   when the code reaches for the course's files, a solution, a fresh copy of an answer's module,
   another process or ctypes;
3. it runs the lab's own checks here (the `judge(answers, rng)` of each lab module), with each
   learner function replaced by a proxy that asks the worker to call it: the checks' cases, then
   inputs drawn from a random seed the learner never sees (the grader's secret, the learner's name, the
   lab), compared here with perflab's references (`REFERENCES`); measured answers are compared with
   numbers this process measures itself;
4. the states of the checks, kept in this process's `grading` module, are the verdict.

A learner's function only ever sees its inputs: not the expected value, not the random seed, not the
checks. Monkeypatching perflab, `grading`, builtins or the checks in the notebook changes the
learner's kernel, which the verdict never reads.

    python -I -S -c BOOT PATHS judge.py < job.json  # prints one line: the nonce, then the verdict as JSON
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import inspect
import io
import json
import os
import pickle
import random
import re
import struct
import subprocess
import symtable
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perflab.classroom.sandbox import Sandbox

WORKER_SOURCE = Path(__file__).with_name("answer_worker.py")
MAX_ANSWER_BYTES = 16 * 2**20  # one answer, as JSON
MAX_ANSWER_ITEMS = 2**21  # numbers in one answer (a tensor's, a list's)
MAX_NOTEBOOK_BYTES = 16 * 2**20  # a submitted notebook (a lab's, outputs included, is well under 1 MiB)
MAX_NOTEBOOK_CELLS = 2000
BOOT = ("import os, sys, runpy; sys.argv.pop(0); sys.path[:0] = sys.argv.pop(0).split(os.pathsep); "
        "runpy.run_path(sys.argv[0], run_name='__main__')")
LAB_IMPORT = re.compile(r"^\s*from\s+(perflab(?:\.\w+)+)\s+import\s+(lab\w+)\s+as\s+lab\s*$", re.M)
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


# ----------------------------------------------------------------------------- taking the answers out
def _cells(nb: Mapping[str, Any]) -> list[str]:
    """Each cell's code (a markdown cell: empty), so that an index is the cell's index in the notebook."""
    out = []
    for c in nb.get("cells", []):
        if c.get("cell_type") != "code":
            out.append("")
            continue
        src = "".join(c.get("source", "")) if isinstance(c.get("source"), list) else str(c.get("source", ""))
        # IPython's magics and shell lines are not Python: they are left out
        out.append("\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in src.splitlines()))
    return out


def _defines(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
        targets = [node.target]
    names = []
    for t in targets:
        for n in ast.walk(t):
            if isinstance(n, ast.Name):
                names.append(n.id)
    return names


def _uses(node: ast.stmt) -> set[str]:
    """The global names a statement reads (a function's own arguments and locals left out)."""
    try:
        table = symtable.symtable(ast.unparse(node), "<cell>", "exec")
    except SyntaxError:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    out: set[str] = set()

    def walk(tab: symtable.SymbolTable) -> None:
        for sym in tab.get_symbols():
            if sym.is_referenced() and (tab.get_type() == "module" or sym.is_global()):
                out.add(sym.get_name())
        for child in tab.get_children():
            walk(child)

    walk(table)
    return out


def statements(nb: Mapping[str, Any]) -> list[tuple[int, ast.stmt]]:
    """The top-level statements of every code cell that parses, with their cell's index."""
    out = []
    for i, src in enumerate(_cells(nb)):
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        out += [(i, node) for node in tree.body]
    return out


def extract(nb: Mapping[str, Any], names: Sequence[str]) -> tuple[str, list[str], dict[str, int]]:
    """(the code that defines `names`, its import lines, the cell each name is last defined in).

    A name's definition is its last top-level `def`, `class`, import or assignment; the code keeps
    it and, recursively, the definitions of the global names it uses that come before it, in the
    notebook's order. Imports are kept; nothing else (prints, measurements, checks) is."""
    stmts = statements(nb)
    keep: set[int] = set()
    where: dict[str, int] = {}

    def last_before(name: str, limit: int) -> int | None:
        for k in range(min(limit, len(stmts)) - 1, -1, -1):
            if name in _defines(stmts[k][1]):
                return k
        return None

    todo = [(n, len(stmts)) for n in names]
    while todo:
        name, limit = todo.pop()
        k = last_before(name, limit)
        if k is None:
            continue
        if name in names and name not in where:
            where[name] = stmts[k][0]
        if k in keep:
            continue
        keep.add(k)
        node = stmts[k][1]
        # a function's body runs later, so it may use names defined after it: look through the whole notebook
        body_limit = len(stmts) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else k
        todo += [(u, body_limit) for u in _uses(node)]
    imports = [k for k, (_, node) in enumerate(stmts) if isinstance(node, (ast.Import, ast.ImportFrom))]
    chosen = sorted(keep | set(imports))
    code = "\n\n".join(ast.unparse(stmts[k][1]) for k in chosen)
    preload = [ast.unparse(stmts[k][1]) for k in imports]
    # an import inside a function runs later, among the learner's code, where loading a library
    # (torch's through ctypes) is refused: its module is loaded first, in the trusted phase
    nested = {a.name for k in chosen for n in ast.walk(stmts[k][1]) if isinstance(n, ast.Import) for a in n.names}
    nested |= {n.module for k in chosen for n in ast.walk(stmts[k][1])
               if isinstance(n, ast.ImportFrom) and n.module and not n.level}
    preload += [f"import {m}" for m in sorted(nested) if re.fullmatch(r"[A-Za-z_][\w.]*", m)]
    return code, preload, where


# ----------------------------------------------------------------------------- the worker
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


class Worker:
    """The learner's definitions, alive in a confined process; `call` and `value` ask it."""

    def __init__(self, code: str, preload: Sequence[str], lab: Any, *, course_dirs: Sequence[str] = (),
                 memory_bytes: int | None = 4 * 2**30, cpu_s: int = 600, threads: int = 1, learner: str = "learner",
                 sandbox: Sandbox | None = None, hidden: Sequence[str] = (), pycache: str | None = None):
        self.box = tempfile.mkdtemp(prefix="perflab-answers-")
        cwd = Path(self.box) / "w" / "w"  # its own folder, and the one above it, hold nothing of anyone's
        cwd.mkdir(parents=True)
        forbidden = forbidden_of(lab)
        readable = set(getattr(lab, "READABLE", ()))  # modules whose source the tracer may read (lab 10)
        blocked_modules = sorted(({m for m, _ in forbidden} | {lab.__name__}) - readable)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.box, "TMPDIR": self.box,
               "LANG": "C.UTF-8", "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
               "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PERFLAB_LEARNER": learner}

        nproc = nproc_limit()

        def limit() -> None:  # in the worker, before it runs anything
            import resource

            for which, value in ((resource.RLIMIT_AS, memory_bytes), (resource.RLIMIT_CPU, cpu_s),
                                 (resource.RLIMIT_FSIZE, 64 * 2**20), (resource.RLIMIT_CORE, 0),
                                 (resource.RLIMIT_NPROC, nproc)):
                if value is None:
                    continue
                with contextlib.suppress(ValueError, OSError):
                    soft, hard = resource.getrlimit(which)
                    top = value if hard == resource.RLIM_INFINITY else min(value, hard)
                    resource.setrlimit(which, (top, hard))

        self.log = open(Path(self.box) / "stderr.log", "wb")  # noqa: SIM115 - closed in close()
        cmd = trusted_python(WORKER_SOURCE, pycache=pycache)
        cmd.insert(1, "-B")  # it reads the grader's bytecode cache, never writes to it
        if sandbox is not None:  # the worker confined: only its own folder writable, the course hidden
            cmd = sandbox.command(cmd, writable=[self.box], readable=[pycache] if pycache else [], hidden=hidden,
                                  cwd=cwd)
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, preexec_fn=limit, start_new_session=True)
        from perflab.classroom.sandbox import python_path

        loads = [*preload, *(f"import {m}" for m in getattr(lab, "PRELOAD", ())), f"import {lab.__name__}",
                 *(f"import {m}" for m in blocked_modules)]
        keep = [q for q in (_qualified(getattr(lab, h, None)) for h in getattr(lab, "HELPERS", ())) if q]
        self._send({"paths": python_path(), "preload": loads, "keep": keep,
                    "forbidden": forbidden, "blocked_dirs": list(course_dirs),
                    "blocked_files": [], "blocked_modules": blocked_modules, "code": code})
        self.forbidden = forbidden
        self.stderr_tail = ""
        first = self._receive()
        if not first.get("ok"):
            self.close()
            raise AnswerError(f"the notebook's definitions failed outside the kernel: {first.get('error')}")

    def _send(self, obj: Any) -> None:
        data = pickle.dumps(obj)
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(struct.pack(">I", len(data)) + data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._ended()

    def _receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        head = self.proc.stdout.read(4)
        if len(head) < 4:
            self._ended()
        (n,) = struct.unpack(">I", head)
        if n > MAX_ANSWER_BYTES:
            raise AnswerError(f"your function returned more than {MAX_ANSWER_BYTES // 2**20} MiB")
        data = self.proc.stdout.read(n)
        try:
            return json.loads(data)
        except ValueError:
            raise AnswerError("the answer's process wrote something that is not an answer") from None

    def _ended(self):
        code = self.proc.wait()
        with contextlib.suppress(OSError):
            self.log.flush()
            self.stderr_tail = (Path(self.box) / "stderr.log").read_text(errors="replace")[-2000:]
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
        if reply.get("not_done"):
            raise NotImplementedError(name)
        if "error" in reply:
            raise AnswerError(f"{name}: {reply['error']}")
        return decode(reply.get("value"))

    def call(self, name: str, *args, **kwargs) -> Any:
        return self.ask("call", name, args, kwargs)

    def value(self, name: str) -> Any:
        return self.ask("get", name)

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
        with contextlib.suppress(OSError):
            self.log.close()
        import shutil

        shutil.rmtree(self.box, ignore_errors=True)


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


def _slow_data_audit() -> dict[str, Any]:
    from perflab.audit import examples
    from perflab.audit.run import run_audit
    from perflab.audit.target import target_from

    audit = run_audit(target_from(examples.slow_data_step(True), "tiny GPT, slow DataLoader"), device="cpu",
                      steps=2, explain_breaks=False)
    return audit.json


MEASUREMENTS: dict[str, Callable[[], Any]] = {"slow_data_audit": _slow_data_audit}


class Answers(Mapping[str, Any]):
    """The learner's answers as the lab's `judge` sees them: `answers["fn"]` is a proxy that calls
    the learner's function in the worker; `answers.value("x")` reads a top-level value there."""

    def __init__(self, worker: Worker, names: Sequence[str], where: Mapping[str, int], code: str = "",
                 nb: Mapping[str, Any] | None = None, learner: str = ""):
        self.worker, self.names, self.where, self.code = worker, list(names), dict(where), code
        self.nb, self.learner = nb or {}, learner

    def literal(self, name: str) -> bool:
        """Whether `name`'s last top-level assignment is a literal (a number, list or dict written out)."""
        found = None
        for _i, node in statements(self.nb):
            if name in _defines(node) and isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                found = node.value
        if found is None:
            return False
        try:
            ast.literal_eval(found)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
        return True

    def first_cell_calling(self, function: str, using: str | None = None) -> int | None:
        """The first cell (0-based, among all cells) that calls `function`, with the name `using`
        among its arguments when given. Found by what is called, not by its name: an alias
        (`m = runner.run_ladder`, `from … import run_ladder as m`, `getattr(runner, "run_ladder")`,
        a `partial`, a function or lambda that calls it) calls it too, and so does whatever goes
        through a name the source does not spell out (`getattr(runner, "run_" + "ladder")`, `eval`, a
        module's `__dict__`: see `_opaque`)."""
        trees = []
        for src in _cells(self.nb):
            try:
                trees.append(ast.parse(src))
            except SyntaxError:
                trees.append(None)
        aliases = {function}

        def mentions(node: ast.AST) -> bool:
            for n in ast.walk(node):
                if (isinstance(n, ast.Name) and n.id in aliases) or (isinstance(n, ast.Attribute) and n.attr in aliases) \
                        or (isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in aliases) \
                        or _opaque(n):
                    return True
            return False

        grew = True
        while grew:  # every name bound to something that reaches the function, until none is new
            grew = False
            for tree in trees:
                for node in ast.walk(tree) if tree is not None else ():
                    new: list[str] = []
                    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None \
                            and mentions(node.value):
                        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                        new = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
                    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(mentions(b) for b in node.body):
                        new = [node.name]
                    elif isinstance(node, ast.ImportFrom):
                        new = [a.asname for a in node.names if a.name in aliases and a.asname]
                    fresh = [n for n in new if n not in aliases]
                    if fresh:
                        aliases.update(fresh)
                        grew = True
        for i, tree in enumerate(trees):
            for node in ast.walk(tree) if tree is not None else ():
                if not isinstance(node, ast.Call) or not mentions(node):
                    continue
                args = [*node.args, *(k.value for k in node.keywords)]
                if using is None or any(isinstance(n, ast.Name) and n.id == using for a in args for n in ast.walk(a)):
                    return i
        return None

    def probe(self, name: str, probe: str, *args, **kwargs) -> Any:
        """`module:function` of perflab, called in the worker on the learner's object `name`; its
        result comes back as JSON, for this process to compare."""
        if name not in self.where:
            return {"not_done": True}
        try:
            return self.worker.ask("probe", name, (probe, *args), kwargs)
        except NotImplementedError:
            return {"not_done": True}

    def source(self, name: str) -> str | None:
        """The code taken from the notebook for `name` (its definition and what it needs)."""
        return self.code if name in self.where else None

    def __getitem__(self, name: str) -> Callable[..., Any]:
        if name not in self.where:
            return _stub(name)
        w = self.worker

        def proxy(*args, **kwargs):
            return w.call(name, *args, **kwargs)

        proxy.__name__ = proxy.__qualname__ = name
        return proxy

    def measure(self, name: str) -> Any:
        """A measurement a lab's `judge` needs from a layer above its own, made here, in the grader's
        process (`MEASUREMENTS`): lab 11's audit exercise reads an audit of `perflab.audit.examples`."""
        if name not in MEASUREMENTS:
            raise KeyError(f"no measurement {name!r} for a lab's judge")
        return MEASUREMENTS[name]()

    def value(self, name: str, default: Any = None) -> Any:
        if name not in self.where:
            return default
        try:
            return self.worker.value(name)
        except NotImplementedError:
            return default

    def __iter__(self):
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


OPAQUE_CALLS = frozenset({"getattr", "vars", "eval", "exec", "compile", "__import__", "import_module",
                          "attrgetter", "methodcaller", "globals", "locals"})


def _opaque(node: ast.AST) -> bool:
    """Whether `node` may reach any function under a name the source does not show: a `getattr` (or
    `attrgetter`, `import_module`, ...) on a name that is not a plain string, `eval`/`exec`, a
    module's `__dict__`. Counted as calling it: a cell that might measure is taken to measure."""
    if isinstance(node, ast.Attribute) and node.attr in ("__dict__", "__getattribute__"):
        return True
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    if name not in OPAQUE_CALLS:
        return False
    if name in ("eval", "exec", "compile", "vars", "globals", "locals"):
        return True
    keys = node.args[1:2] if name == "getattr" else node.args[:1]
    return not keys or not all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in keys)


def _stub(name: str) -> Callable[..., Any]:
    def missing(*args, **kwargs):
        raise NotImplementedError(f"{name} is not defined at the top level of the notebook")

    missing.__name__ = name
    return missing


# ----------------------------------------------------------------------------- one verdict
def learner_rng(secret: str, learner: str, lab: str) -> random.Random:
    """The grading inputs' generator: the grader's secret, the learner and the lab; never shipped."""
    seed = hashlib.sha256(f"{secret}\x00{learner}\x00{lab}".encode()).digest()
    return random.Random(int.from_bytes(seed[:8], "big"))


def lab_module_name(shipped: Mapping[str, Any]) -> str | None:
    """`perflab.flops.lab01` from the shipped lab's import line (`from perflab.flops import lab01 as lab`)."""
    for src in _cells(shipped):
        m = LAB_IMPORT.search(src)
        if m:
            return f"{m.group(1)}.{m.group(2)}"
    return None


def verdict(submission: Mapping[str, Any], shipped: Mapping[str, Any], *, learner: str, secret: str,
            course_dirs: Sequence[str] = (), memory_bytes: int | None = 4 * 2**30, cpu_s: int = 600,
            threads: int = 1, sandbox: Sandbox | None = None, hidden: Sequence[str] = (),
            pycache: str | None = None) -> tuple[str, str]:
    """(outcome, message) for one submission: 'done', 'not done', 'wrong' or 'error'."""
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
    try:
        worker = Worker(code, preload, lab, course_dirs=course_dirs, memory_bytes=memory_bytes, cpu_s=cpu_s,
                        threads=threads, learner=learner, sandbox=sandbox, hidden=hidden, pycache=pycache)
    except Forbidden as e:
        return "wrong", str(e)
    except AnswerError as e:
        return "error", str(e)
    answers = Answers(worker, names, where, code, submission, learner)
    grading.reset()
    if sandbox is not None:
        _confine_ranks(sandbox, hidden)
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
        if sandbox is not None:
            from perflab.distributed import torchrun

            torchrun.CONFINE = None
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


def _confine_ranks(sandbox: Sandbox, hidden: Sequence[str]) -> None:
    """Ranks that a lab's judge starts on the learner's code (lab 06's ring) run in the sandbox too:
    the run's folder writable, the files the command names (the learner's source) readable."""
    from perflab.distributed import torchrun

    def confine(cmd: list[str], run_dir: Path) -> list[str]:
        files = [a for a in cmd if a.startswith(os.sep) and os.path.isfile(a)]
        return sandbox.command(cmd, writable=[run_dir], readable=[os.path.dirname(f) for f in files], hidden=hidden)

    torchrun.CONFINE = confine


def _first(text: str) -> str:
    text = str(text).strip()
    return text.splitlines()[0].strip()[:300] if text else ""


# ----------------------------------------------------------------------------- the judge process
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


def read_notebook(data: bytes | str) -> dict[str, Any]:
    """A notebook's JSON, bounded: at most MAX_NOTEBOOK_BYTES and MAX_NOTEBOOK_CELLS (ValueError beyond)."""
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"the notebook is {len(data) / 2**20:.0f} MiB, over the {MAX_NOTEBOOK_BYTES // 2**20} MiB "
                         "a lab may be (clear its outputs)")
    nb = json.loads(data)
    if not isinstance(nb, dict) or not isinstance(nb.get("cells", []), list):
        raise ValueError("not a notebook (no list of cells)")
    if len(nb.get("cells", [])) > MAX_NOTEBOOK_CELLS:
        raise ValueError(f"{len(nb['cells'])} cells, over the {MAX_NOTEBOOK_CELLS} a lab may have")
    return nb


def trusted_python(script: Path | str, *, pycache: str | None = None) -> list[str]:
    """The command that runs `script` in a Python that reads nothing a learner could have planted:
    isolated (`-I`: no environment variables, no user site), without site-packages' `.pth` files
    (`-S`: the trusted folders are put on its path by hand), with a bytecode cache of the grader's
    own (`-X pycache_prefix`) or none."""
    from perflab.classroom.sandbox import python_path

    cache = ["-X", f"pycache_prefix={pycache}"] if pycache else ["-B"]
    return [sys.executable, "-I", "-S", *cache, "-c", BOOT, os.pathsep.join(python_path()), str(script)]


def main() -> int:
    from perflab.classroom.sandbox import Sandbox, protect

    protect()
    job = json.loads(sys.stdin.buffer.read(MAX_NOTEBOOK_BYTES * 8 + 2**20))  # the notebook, JSON-escaped
    try:
        sub, shipped = read_notebook(job["notebook"]), read_notebook(Path(job["shipped"]).read_bytes())
        tool = job.get("sandbox")
        outcome, message = verdict(sub, shipped, learner=job["learner"], secret=job["secret"],
                                   course_dirs=job.get("course_dirs", ()), memory_bytes=job.get("memory_bytes"),
                                   cpu_s=int(job.get("cpu_s", 600)), threads=int(job.get("threads", 1)),
                                   sandbox=Sandbox(tool) if tool else None, hidden=job.get("hidden", ()),
                                   pycache=job.get("pycache"))
    except ValueError as e:
        outcome, message = "error", f"malformed notebook ({_first(str(e))[:160]})"
    except Exception as e:  # noqa: BLE001 - the judge's own failure: an error grade that says so
        outcome, message = "error", f"the grader failed: {type(e).__name__}: {_first(str(e))}"
    out = sys.__stdout__ or sys.stdout
    out.write(job["nonce"] + json.dumps({"outcome": outcome, "message": message}) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
