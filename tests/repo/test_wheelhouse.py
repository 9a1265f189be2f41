"""The offline wheelhouse (tools/wheelhouse.py, `make wheelhouse PY=3.12`): what it holds, and that
a wheelhouse resolves with `pip install --no-index --dry-run`.

Downloading one needs a package index, which a test must not: the positive check runs on a
wheelhouse that is already there ($PERFLAB_WHEELHOUSE, or ./wheelhouse) and is skipped, saying
so, where there is none. That an incomplete folder fails the check runs everywhere, offline.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("wheelhouse", ROOT / "tools" / "wheelhouse.py")
assert spec is not None and spec.loader is not None
wheelhouse = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wheelhouse)
HERE = f"{sys.version_info.major}.{sys.version_info.minor}"


def _name(req: str) -> str:
    return re.split(r"[\s<>=!~\[;]", req, maxsplit=1)[0].lower()


def test_the_list_is_pyprojects_without_torch_plus_the_build_backend():
    text = (ROOT / "pyproject.toml").read_text()
    deps = {_name(d) for d in wheelhouse._array(text, "dependencies")}
    assert "torch" in deps and "numpy" in deps  # the parser read the real list
    extras = wheelhouse.extra_names(text)
    assert {"course", "test", "site", "hta", "dev"} <= set(extras)
    deps |= {_name(d) for e in extras for d in wheelhouse._array(text, e)}
    assert {"jupyterlab", "pytest", "mkdocs", "holistictraceanalysis", "ruff"} <= deps  # every extra's list read
    reqs = wheelhouse.requirements()
    names = {_name(r) for r in reqs}
    assert names == (deps - {"torch"}) | {"setuptools"} | {_name(r) for r in wheelhouse.TORCH_RUNTIME}
    assert "filelock" in names and "sympy" in names
    assert "setuptools>=64" in reqs  # pyproject's build-system, for `pip install -e .` offline
    tags = wheelhouse.target_args("3.12", "x86_64")
    assert tags[:3] == ["--only-binary=:all:", "--python-version", "3.12"]
    assert "manylinux2014_x86_64" in tags


def test_a_folder_missing_wheels_does_not_resolve(tmp_path):
    r = wheelhouse.check(tmp_path, HERE, platform.machine(), ["tqdm"])
    assert r.returncode != 0
    assert "tqdm" in (r.stdout + r.stderr)


def _cached() -> Path | None:
    for p in (os.environ.get("PERFLAB_WHEELHOUSE"), ROOT / "wheelhouse"):
        if p and Path(p).is_dir() and any(Path(p).glob("*.whl")):
            return Path(p)
    return None


def _made_for(dest: Path) -> str:
    """The Python a wheelhouse was made for, read from its compiled wheels' cpXY tags."""
    from collections import Counter

    tags = Counter(f"{a}.{b}" for w in dest.glob("*.whl") for a, b in re.findall(r"-cp(3)(\d+)-cp3\d+", w.name))
    return tags.most_common(1)[0][0] if tags else HERE


@pytest.mark.slow  # pip resolves ~150 wheels: about 10 s of CPU
@pytest.mark.skipif(_cached() is None, reason="no wheelhouse here (make wheelhouse downloads one; a test never does)")
def test_the_wheelhouse_resolves_offline():
    dest = _cached()
    assert dest is not None
    r = wheelhouse.check(dest, _made_for(dest), platform.machine(), wheelhouse.requirements())
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    assert "Would install" in r.stdout
