"""What a submitted notebook's source says, read without running it: the judge's first step.

The judge (judge.py) never runs a learner's kernel; it reads the notebook's source as a file:

* `read_notebook`: a notebook's JSON, bounded in bytes and cells (a malformed one is a ValueError);
* `extract`: each answer the lab names (`LEARNER_ANSWERS`), taken out with the top-level
  definitions, imports and assignments it needs, and nothing else (no measurement, no check call);
* `lab_module_name`: the lab module a shipped lab imports (`from perflab.flops import lab01 as lab`);
* `is_literal` and `first_cell_calling`: what a lab's judge asks of the source itself (a number
  written out rather than computed; the first cell that measures, however the call is spelled).
"""

from __future__ import annotations

import ast
import json
import re
import symtable
from collections.abc import Mapping, Sequence
from typing import Any

from perflab.core.jsonable import JSON

MAX_NOTEBOOK_BYTES = 16 * 2**20  # a submitted notebook (a lab's, outputs included, is well under 1 MiB)
MAX_NOTEBOOK_CELLS = 2000
LAB_IMPORT = re.compile(r"^\s*from\s+(perflab(?:\.\w+)+)\s+import\s+(lab\w+)\s+as\s+lab\s*$", re.M)


def read_notebook(data: bytes | str) -> JSON:
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


def lab_module_name(shipped: Mapping[str, Any]) -> str | None:
    """`perflab.flops.lab01` from the shipped lab's import line (`from perflab.flops import lab01 as lab`)."""
    for src in _cells(shipped):
        m = LAB_IMPORT.search(src)
        if m:
            return f"{m.group(1)}.{m.group(2)}"
    return None


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


# ----------------------------------------------------------------------------- what a lab's judge asks of the source
def is_literal(nb: Mapping[str, Any], name: str) -> bool:
    """Whether `name`'s last top-level assignment is a literal (a number, list or dict written out)."""
    found = None
    for _i, node in statements(nb):
        if name in _defines(node) and isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            found = node.value
    if found is None:
        return False
    try:
        ast.literal_eval(found)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def first_cell_calling(nb: Mapping[str, Any], function: str, using: str | None = None) -> int | None:
    """The first cell (0-based, among all cells) that calls `function`, with the name `using`
    among its arguments when given. Found by what is called, not by its name: an alias
    (`m = runner.run_ladder`, `from … import run_ladder as m`, `getattr(runner, "run_ladder")`,
    a `partial`, a function or lambda that calls it) calls it too, and so does whatever goes
    through a name the source does not spell out (`getattr(runner, "run_" + "ladder")`, `eval`, a
    module's `__dict__`: see `_opaque`)."""
    trees = []
    for src in _cells(nb):
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
