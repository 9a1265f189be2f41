"""The install story: one dependency list in two files, the README's commands, safe defaults."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONDA_NAMES = {"pytorch": "torch"}  # conda-forge name -> PyPI name


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;]", req.strip(), maxsplit=1)[0].lower()


def pyproject() -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        pytest.skip("tomllib needs Python 3.11")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def pyproject_deps() -> set[str]:
    """perflab's dependencies and every extra but dev: the whole course's environment."""
    project = pyproject()
    deps = {_name(d) for d in project["dependencies"]}
    for extra, reqs in project.get("optional-dependencies", {}).items():
        if extra != "dev":
            deps |= {_name(d) for d in reqs}
    return deps


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


def test_a_learner_installs_only_what_import_perflab_and_the_cli_need():
    """The test runner, the site builder, the notebooks' stack and the trace tool are extras; the
    pytest pin lives in the test extra, so it never constrains a learner's own pytest."""
    project = pyproject()
    runtime = {_name(d) for d in project["dependencies"]}
    assert runtime == {"torch", "numpy", "pandas", "matplotlib", "tqdm", "psutil", "nvidia-ml-py"}
    extras = {k: {_name(d) for d in v} for k, v in project["optional-dependencies"].items()}
    assert {"jupyterlab", "ipykernel", "ipywidgets", "ipyexperiments", "papermill"} <= extras["course"]
    assert {"pytest", "pytest-timeout", "pytest-xdist"} <= extras["test"]
    assert {"mkdocs", "mkdocs-material", "mkdocs-jupyter", "latex2mathml"} <= extras["site"]
    assert extras["hta"] == {"holistictraceanalysis"}
    assert "pytest<9.2" in project["optional-dependencies"]["test"]


@pytest.mark.parametrize("target, extras", [("lab", "course,kernels"), ("release", "course"),
                                            ("test", "course,kernels,test,site,hta"),
                                            ("test-fast", "course,kernels,test,site,hta")])
def test_make_targets_install_the_extras_they_need(target, extras):
    out = subprocess.run(["make", "-n", target, "LAB_PORT=0"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    setup = next(ln for ln in out.splitlines() if "tools/setup_env.py" in ln)
    assert setup.endswith(f"--extras {extras}")


def test_what_needs_an_extra_says_which_in_one_line():
    from perflab.core.errors import PerflabError
    from perflab.core.extras import need

    assert need("json", "course", "x").dumps({}) == "{}"
    with pytest.raises(PerflabError) as e:
        need("perflab_no_such_package.sub", "course", "the lessons' widgets")
    assert str(e.value) == "the lessons' widgets: perflab_no_such_package is not installed; pip install 'perflab[course]'"
