"""The install story: one dependency list in two files, the README's commands, safe defaults."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"pytorch": "torch"}  # conda-forge name -> PyPI name


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;]", req.strip(), maxsplit=1)[0].lower()


def pyproject_deps() -> set[str]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        pytest.skip("tomllib needs Python 3.11")
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    test_extra = data["project"].get("optional-dependencies", {}).get("test", [])  # environment.yml has them too
    return {_name(d) for d in [*data["project"]["dependencies"], *test_extra]}


def environment_deps() -> set[str]:
    yaml = pytest.importorskip("yaml")
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    names = set()
    for item in env["dependencies"]:
        items = item["pip"] if isinstance(item, dict) else [item]
        for dep in items:
            if dep == "pip" or dep.startswith(("python=", "python>", "-")):
                continue
            names.add(CONDA_NAMES.get(_name(dep), _name(dep)))
    return names


def test_environment_yml_agrees_with_pyproject():
    assert pyproject_deps() == environment_deps()
    assert {"torch", "jupyterlab", "ipywidgets", "matplotlib", "pandas", "ipyexperiments", "papermill"} <= pyproject_deps()


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make lab" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_setup_never_asks_for_unpinned_torch_on_cpu():
    src = (ROOT / "tools" / "setup_env.py").read_text()
    assert 'f"torch=={CPU_TORCH}+cpu"' in src and 'CPU_TORCH = "2.13.0"' in src
    assert "download.pytorch.org/whl/cpu" in src


def _lab_command() -> str:
    out = subprocess.run(["make", "-n", "lab", "LAB_PORT=0"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    joined = out.replace("\\\n", " ")
    line = next(ln for ln in joined.splitlines() if "jupyter lab" in ln)
    return line


def test_lab_listens_on_localhost_with_token():
    cmd = _lab_command()
    assert "--ServerApp.ip=127.0.0.1" in cmd
    assert "token=''" not in cmd and 'token=""' not in cmd and "--ServerApp.token" not in cmd
    assert "password" not in cmd.lower() and "--ServerApp.ip=0.0.0.0" not in cmd
