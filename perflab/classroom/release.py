"""The course as learners get it: no `labs/solutions/`, every notebook's outputs cleared.

    perflab release OUT        # OUT/perflab-course/ and OUT/perflab-course.zip

What goes in: the package (`perflab/`), the lessons (`notebooks/`), the labs (`labs/`, without
`solutions/`), `data/`, the README (saying that the teacher has the solutions), the install files
(pyproject.toml, environment.yml, Makefile), the setup script `make lab` runs (tools/setup_env.py)
and the one that fills an offline wheel folder (tools/wheelhouse.py). The tests stay out: they run
the solutions. `solution_fingerprints` and `solution_code_in` let a test prove that no statement of a
solution's functions is in the release.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import zipfile
from pathlib import Path

from perflab.core.errors import InputError
from perflab.course.nbclean import clean

NAME = "perflab-course"
TOP_FILES = ("README.md", "LICENSE", "pyproject.toml", "environment.yml", "Makefile", ".gitignore", "tools/setup_env.py",
             "tools/wheelhouse.py")
# the README's sentences that are not true of the release, and what the release says instead
README_EDITS = {"Solutions are in `labs/solutions/`.": "Your teacher has the solutions."}
TOP_DIRS = ("perflab", "notebooks", "labs", "data")
SKIP_PARTS = {"__pycache__", ".ipynb_checkpoints", "solutions", "results", ".pytest_cache"}


def course_root() -> Path:
    """The checkout the release is built from: the folder holding perflab/, labs/ and notebooks/."""
    import perflab

    root = Path(perflab.__file__).resolve().parents[1]
    if not all((root / d).is_dir() for d in ("labs", "notebooks")):
        raise InputError(f"{root} has no labs/ and notebooks/: build the release from a checkout of the course")
    return root


def build_release(out: Path | str, root: Path | str | None = None) -> tuple[Path, Path]:
    """Write OUT/perflab-course/ (replacing an earlier release there) and OUT/perflab-course.zip."""
    src = Path(root) if root is not None else course_root()
    out = Path(out).expanduser().resolve()
    home = src.resolve()
    if out == home or (home in out.parents and out.relative_to(home).parts[0] in TOP_DIRS):
        raise InputError(f"{out} is inside the course's own folders: choose an output folder outside them")
    dest = out / NAME
    if dest.exists():
        if not (dest / "perflab").is_dir():
            raise InputError(f"{dest} exists and is not an earlier release: remove it or choose another OUT")
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for rel in TOP_FILES:
        if (src / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, dest / rel)
    readme = dest / "README.md"
    if readme.is_file():
        text = readme.read_text()
        for old, new in README_EDITS.items():  # the sentence as written, wherever the README wraps its lines
            text = re.sub(r"\s+".join(re.escape(word) for word in old.split()), new, text)
        readme.write_text(text)
    for top in TOP_DIRS:
        for path in sorted((src / top).rglob("*")) if (src / top).is_dir() else []:
            rel = path.relative_to(src)
            if not path.is_file() or SKIP_PARTS & set(rel.parts) or path.suffix in (".pyc", ".egg-info"):
                continue
            if any(p.endswith(".egg-info") for p in rel.parts):
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.suffix == ".ipynb":
                target.write_text(json.dumps(clean(json.loads(path.read_text())), indent=1, ensure_ascii=False) + "\n")
            else:
                shutil.copy2(path, target)
    zpath = out / f"{NAME}.zip"
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(dest.rglob("*")):
            if path.is_file():
                z.write(path, Path(NAME) / path.relative_to(dest))
    return dest, zpath


# ----------------------------------------------------------------------------- proving it
def _code_cells(path: Path) -> list[str]:
    if path.suffix == ".py":
        return [path.read_text(errors="replace")]
    nb = json.loads(path.read_text())
    return ["".join(c.get("source", "")) for c in nb.get("cells", []) if c.get("cell_type") == "code"]


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except SyntaxError:  # a cell with IPython magics
        lines = [ln for ln in code.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        try:
            return ast.parse("\n".join(lines))
        except SyntaxError:
            return None


def _functions(path: Path) -> dict[str, ast.FunctionDef]:
    out = {}
    for code in _code_cells(path):
        tree = _parse(code)
        for node in tree.body if tree else []:
            if isinstance(node, ast.FunctionDef):
                out[node.name] = node
    return out


def _statements(fn: ast.FunctionDef) -> list[str]:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # the docstring is the lab's too
    return [ast.unparse(s) for s in body]


def solution_fingerprints(labs_dir: Path | str) -> dict[str, str]:
    """Every statement of the bodies of the functions a learner writes (those the shipped lab
    defines too), as the solution has them and the lab does not: normalized source -> where."""
    labs_dir = Path(labs_dir)
    prints: dict[str, str] = {}
    for sol in sorted((labs_dir / "solutions").glob("*.ipynb")):
        lab = labs_dir / sol.name
        stubs = _functions(lab) if lab.is_file() else {}
        for name, fn in _functions(sol).items():
            if name not in stubs:
                continue
            shipped = set(_statements(stubs[name]))
            for stmt in _statements(fn):
                if stmt not in shipped and stmt not in ("pass", "raise NotImplementedError"):
                    prints[stmt] = f"{sol.name}: {name}"
    return prints


def solution_code_in(folder: Path | str, prints: dict[str, str]) -> list[str]:
    """Where a solution statement appears in `folder`'s Python files and notebooks, one line each."""
    found = []
    for path in sorted(Path(folder).rglob("*")):
        if path.suffix not in (".py", ".ipynb") or not path.is_file():
            continue
        for code in _code_cells(path):
            tree = _parse(code)
            if tree is None:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.stmt):
                    text = ast.unparse(node)
                    if text in prints:
                        found.append(f"{path.relative_to(folder)}: {text.splitlines()[0][:80]} (from {prints[text]})")
    return found
