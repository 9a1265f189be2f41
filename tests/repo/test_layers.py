"""The package's layout is the course's map, and imports only go down it (README, "How the code is
laid out"): commands and cli on top, then classroom (the teacher's grading), then course, then one
package per lesson topic, then workload and grading (the labs' tutor), then core. A topic may use another topic's formulas when its package docstring names that package,
never its plots, widgets or lab checks. No module imports itself back through a circle.

The checker reads every module's imports with `ast` (function-level imports included: a lazy
import is still a dependency), so a new module is checked the day it is added.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

import perflab

PKG = Path(perflab.__file__).parent
TOPICS = ("flops", "memory", "gemm", "attention", "distributed", "dataloading", "numa", "profiling", "compiler", "shard",
          "tune", "plan", "audit", "hunt")
TOPICS += ("numerics",)  # lesson 16
# the labs' tutor (grading) stands on core alone, beside workload; the teacher's classroom above the notebooks' course
RANK = {"core": 1, "grading": 2, "workload": 2, **{t: 3 for t in TOPICS}, "course": 4, "classroom": 5, "commands": 6,
        "cli": 6, "__main__": 6}
PRIVATE = ("plots", "widgets")  # a topic never uses another topic's figures or widgets


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every perflab import in the file, lazy ones included."""
    mod = module_name(path, root)
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == root.name]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != root.name:
                continue
            # `from perflab.x import y` imports the module perflab.x.y when there is one
            for a in node.names:
                sub = f"{target}.{a.name}"
                rel = sub.split(".")[1:]
                is_mod = (root.joinpath(*rel).with_suffix(".py").is_file() or root.joinpath(*rel, "__init__.py").is_file())
                out.append((node.lineno, sub if is_mod else target))
    return out


def layer_of(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else None


def check_layers(root: Path) -> list[str]:
    """Every upward import, forbidden cross-topic import and import circle, one line each."""
    problems: list[str] = []
    graph: dict[str, set[str]] = {}
    docs = {t: (ast.get_docstring(ast.parse((root / t / "__init__.py").read_text())) or "")
            for t in TOPICS if (root / t / "__init__.py").is_file()}
    for path in sorted(root.rglob("*.py")):
        mod = module_name(path, root)
        src_layer = layer_of(mod)
        for line, target in imports_of(path, root):
            graph.setdefault(mod, set()).add(target)
            dst_layer = layer_of(target)
            where = f"{path.relative_to(root.parent)}:{line} imports {target}"
            if dst_layer is None or dst_layer == "_lazy" or src_layer is None or src_layer == "_lazy":
                if src_layer in (None, "_lazy") and dst_layer not in (None, "_lazy"):
                    problems.append(f"{where}: the package root imports nothing but perflab._lazy")
                continue
            if src_layer == dst_layer:
                continue
            if src_layer not in RANK or dst_layer not in RANK:
                problems.append(f"{where}: '{src_layer if src_layer not in RANK else dst_layer}' is not a known layer "
                                "(add it to the layout in README and this test)")
                continue
            if RANK[dst_layer] > RANK[src_layer]:
                problems.append(f"{where}: upward import ({src_layer} is below {dst_layer})")
            elif RANK[dst_layer] == RANK[src_layer] == 3:
                leaf = target.split(".")[2] if target.count(".") >= 2 else ""
                if leaf in PRIVATE or leaf.startswith("lab"):
                    problems.append(f"{where}: a topic may not use another topic's {leaf}")
                elif f"perflab.{dst_layer}" not in docs.get(src_layer, ""):
                    problems.append(f"{where}: cross-topic import not named in perflab/{src_layer}/__init__.py's docstring")
    # circles (a module reaching itself through its imports); a package's lazy __init__ is not an edge
    seen_cycles = set()

    def visit(node, stack, on_stack):
        for nxt in sorted(graph.get(node, ())):
            if nxt in on_stack:
                cyc = stack[stack.index(nxt):] + [nxt]
                key = frozenset(cyc)
                if key not in seen_cycles:
                    seen_cycles.add(key)
                    problems.append("import circle: " + " → ".join(cyc))
            elif nxt not in done:
                on_stack.add(nxt)
                visit(nxt, stack + [nxt], on_stack)
                on_stack.discard(nxt)
        done.add(node)

    done: set[str] = set()
    for m in sorted(graph):
        if m not in done:
            visit(m, [m], {m})
    problems += package_circles(graph)
    return problems


def package_circles(graph: dict[str, set[str]]) -> list[str]:
    """Circles between packages (cli, commands, course, topics, workload, core): `commands.flops`
    importing a helper from `cli` while `cli` imports the commands is a circle even when no single
    module reaches itself (the commands are imported lazily by name)."""
    edges: dict[str, set[str]] = {}
    for src, targets in graph.items():
        a = layer_of(src)
        for dst in targets:
            b = layer_of(dst)
            if a and b and a != b and "_lazy" not in (a, b):
                edges.setdefault(a, set()).add(b)
    problems, seen = [], set()
    for start in sorted(edges):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(edges.get(node, ())):
                if nxt == start:
                    key = frozenset(path)
                    if key not in seen:
                        seen.add(key)
                        problems.append("package circle: " + " → ".join(path + [start]))
                elif nxt not in path:
                    stack.append((nxt, path + [nxt]))
    return problems


def test_perflab_imports_only_go_down():
    problems = check_layers(PKG)
    assert not problems, "\n".join(problems)


def _fake_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "perflab"
    for rel, src in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(src))
    for d in [p for p in root.rglob("*") if p.is_dir()] + [root]:
        (d / "__init__.py").touch()
    return root


def test_the_checker_catches_an_upward_import(tmp_path):
    root = _fake_tree(tmp_path, {
        "core/timing.py": "from perflab.course import widgets\n",
        "course/widgets.py": "",
        "flops/mfu.py": "from perflab.core import timing\n",
    })
    problems = check_layers(root)
    assert len(problems) == 1 and "perflab/core/timing.py:1 imports perflab.course.widgets: upward import" in problems[0]


def test_the_checker_catches_a_lazy_upward_import_and_a_circle(tmp_path):
    root = _fake_tree(tmp_path, {
        "core/measure.py": "def f():\n    from perflab.workload import train\n",
        "workload/train.py": "from perflab.core.measure import f\n",
        "core/a.py": "from . import b\n",
        "core/b.py": "def g():\n    from .a import x\n",
    })
    problems = check_layers(root)
    assert any("core/measure.py:2 imports perflab.workload.train: upward import" in p for p in problems)
    assert any(p.startswith("import circle:") and "perflab.core.a" in p and "perflab.core.b" in p for p in problems)


def test_the_checker_guards_topics_from_each_other(tmp_path):
    root = _fake_tree(tmp_path, {
        "flops/mfu.py": "from perflab.gemm import mamf\n",
        "memory/probe.py": "from perflab.gemm.plots import fig\n",
        "gemm/mamf.py": "", "gemm/plots.py": "fig = 1\n",
    })
    problems = check_layers(root)
    assert any("flops/mfu.py:1 imports perflab.gemm.mamf: cross-topic import not named" in p for p in problems)
    assert any("memory/probe.py:1 imports perflab.gemm.plots: a topic may not use another topic's plots" in p for p in problems)
    (root / "flops" / "__init__.py").write_text('"""Uses perflab.gemm\'s ceiling."""\n')
    assert not any("flops/mfu.py" in p for p in check_layers(root))


@pytest.mark.parametrize("pkg", sorted(p.parent.name for p in PKG.glob("*/__init__.py") if p.parent.name != "commands"))
def test_every_package_lists_its_modules_lazily_and_in_its_docstring(pkg):
    import importlib

    p = importlib.import_module(f"perflab.{pkg}")
    here = {q.stem for q in (PKG / pkg).glob("*.py") if not q.stem.startswith("_")}
    here |= {q.name for q in (PKG / pkg).iterdir() if (q / "__init__.py").is_file()}
    assert set(p.MODULES) == here, f"perflab/{pkg}/__init__.py MODULES differs from its files"
    doc = p.__doc__ or ""
    missing = [m for m in p.MODULES if f"`{m}`" not in doc]
    assert not missing, f"perflab/{pkg}/__init__.py's docstring does not list {missing}"
    for m in p.MODULES:
        assert getattr(p, m).__name__ == f"perflab.{pkg}.{m}"


def test_the_checker_catches_a_package_circle(tmp_path):
    # cli imports the commands by name at run time; a command importing a helper back from cli
    # closes a circle between the two packages although no module imports itself
    root = _fake_tree(tmp_path, {
        "cli.py": "def main():\n    from perflab.commands import flops\n\ndef emit():\n    pass\n",
        "commands/flops.py": "from perflab.cli import emit\n",
    })
    problems = check_layers(root)
    assert any(p.startswith("package circle:") and "cli" in p and "commands" in p for p in problems), problems
    (root / "commands" / "_args.py").write_text("def emit():\n    pass\n")
    (root / "commands" / "flops.py").write_text("from perflab.commands._args import emit\n")
    assert check_layers(root) == []
