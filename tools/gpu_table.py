"""The GPU-only code of perflab, found by reading it: the table in README's "GPU" section.

    python tools/gpu_table.py            # print the table
    python tools/gpu_table.py --write    # put it into README.md between its markers
    python tools/gpu_table.py --check    # exit 1 when README's table is not current (tests/repo/test_gpu_table.py)

A function is **GPU only** when it refuses to run without CUDA (among its first statements an
`if` on a test that names CUDA, such as `torch.cuda.is_available()` or `dev.type != "cuda"`,
raises or returns, or a `_require_gpu()` helper is called), or when its name says it is CUDA's or
NVIDIA's driver's (`cuda`, `nvml`, `nvidia`). Anywhere in a function, the statements after an
`if <no CUDA>: return/raise` in the same block run only on a GPU.
It **has a CUDA branch** when some `if` (or conditional expression) in it tests for CUDA or for
`on_gpu`: the lines under that branch never run on a CPU. `gpu_lines` gives those line numbers to
tools/coverage_map.py, which counts them apart from the CPU-reachable lines no test runs.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- gpu-table:start -->", "<!-- gpu-table:end -->"


def _mentions_gpu(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr in ("cuda", "on_gpu"):
            return True
        if isinstance(n, ast.Name) and n.id in ("cuda", "on_gpu"):
            return True
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("cuda"):
            return True
    return False


def _negated(test: ast.AST) -> bool:
    """A test true when there is *no* GPU (`not ...cuda...`, `x != "cuda"`, or such tests joined by `or`)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return True
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return any(_mentions_gpu(v) and _negated(v) for v in test.values)
    return isinstance(test, ast.Compare) and any(isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)) for op in test.ops)


def _calls_require_gpu(stmt: ast.stmt) -> bool:
    """`_require_gpu()` or the like: a helper that raises without a GPU."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    f = stmt.value.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name.lstrip("_").startswith(("require_gpu", "require_cuda", "need_gpu", "need_cuda"))


def _raises(body: list[ast.stmt]) -> bool:
    return any(isinstance(s, ast.Raise) for s in body)


def _no_gpu_exit(stmt: ast.stmt) -> bool:
    """`if <no CUDA>: ... raise/return`: what follows it in the same block needs a GPU."""
    return (isinstance(stmt, ast.If) and _mentions_gpu(stmt.test) and _negated(stmt.test) and not stmt.orelse
            and bool(stmt.body) and isinstance(stmt.body[-1], (ast.Raise, ast.Return)))


@dataclass
class Func:
    module: str
    name: str
    line: int
    gpu_only: bool
    branch_lines: set[int] = field(default_factory=set)

    @property
    def kind(self) -> str:
        return "GPU only" if self.gpu_only else "CUDA branch"


def _body_lines(stmts: list[ast.stmt]) -> set[int]:
    out: set[int] = set()
    for s in stmts:
        out.update(range(s.lineno, (s.end_lineno or s.lineno) + 1))
    return out


def _scan_function(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[bool, set[int]]:
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    guard = any(_no_gpu_exit(s) or _calls_require_gpu(s) for s in body[:4])
    guard = guard or any(word in fn.name.lower() for word in ("cuda", "nvml", "nvidia"))
    lines: set[int] = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.If) and _mentions_gpu(n.test):
            # the branch taken only with a GPU: the body of `if cuda`, the else of `if not cuda`
            lines |= _body_lines(n.orelse if _negated(n.test) else n.body)
        for block in (getattr(n, "body", None), getattr(n, "orelse", None)):
            if isinstance(block, list):
                # `if not cuda: return/raise ...` leaves the rest of its block to a GPU
                for i, s in enumerate(block):
                    if _no_gpu_exit(s):
                        lines |= _body_lines(block[i + 1:])
                        break
    if guard:
        lines |= _body_lines(body)  # all but the docstring
    return guard, lines


def scan(root: Path = ROOT / "perflab") -> list[Func]:
    funcs: list[Func] = []
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        tree = ast.parse(path.read_text(), filename=str(path))

        def visit(node: ast.AST, prefix: str, module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    guard, lines = _scan_function(child)
                    if guard or lines:
                        funcs.append(Func(module, prefix + child.name, child.lineno, guard, lines))

        visit(tree, "")
    return funcs


def gpu_lines(root: Path = ROOT / "perflab") -> dict[str, set[int]]:
    """File path (relative to the repository) -> line numbers that run only on a CUDA GPU."""
    out: dict[str, set[int]] = {}
    for f in scan(root):
        path = f.module.replace(".", "/") + ".py"
        if not (ROOT / path).exists():
            path = f.module.replace(".", "/") + "/__init__.py"
        out.setdefault(path, set()).update(f.branch_lines)
    return out


def table(funcs: list[Func] | None = None) -> str:
    funcs = scan() if funcs is None else funcs
    only = sum(f.gpu_only for f in funcs)
    rows = [f"{len(funcs)} functions hold code that runs only on a CUDA GPU: {only} refuse to run without one "
            f"(GPU only), the others have a CUDA branch beside their CPU path. Generated by "
            "`python tools/gpu_table.py --write`; `tests/repo/test_gpu_table.py` checks it is current.",
            "", "| module | function | kind |", "|---|---|---|"]
    rows += [f"| `{f.module}` | `{f.name}` | {f.kind} |"
             for f in sorted(funcs, key=lambda f: (not f.gpu_only, f.module, f.line))]
    return "\n".join(rows)


def readme_with_table(text: str) -> str:
    if START not in text or END not in text:
        raise SystemExit(f"README.md has no {START} ... {END} markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="README's table of perflab's GPU-only code")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true", help="write the table into README.md")
    g.add_argument("--check", action="store_true", help="exit 1 when README.md's table is not current")
    args = ap.parse_args(argv)
    readme = ROOT / "README.md"
    if args.write:
        readme.write_text(readme_with_table(readme.read_text()))
        return 0
    if args.check:
        text = readme.read_text()
        if readme_with_table(text) != text:
            print("README.md's GPU table is not current: run `python tools/gpu_table.py --write`", file=sys.stderr)
            return 1
        return 0
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
