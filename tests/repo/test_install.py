"""`pip install perflab` alone gives a working CLI: a fresh virtual environment gets this checkout
with its runtime dependencies only, then runs `perflab env` and `perflab flops`.

Downloading torch again would take minutes, so torch (and the packages torch itself requires) is
taken from the running environment through a .pth file that names a folder holding only them;
everything perflab declares (numpy, pandas, matplotlib, ...) is resolved and installed by pip from
pyproject.toml, as on a learner's machine. Nothing else of the running environment is visible.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _requirements(dist: md.Distribution) -> list[str]:
    out = []
    for req in dist.requires or []:
        if "extra ==" in req:
            continue
        out.append(re.split(r"[\s<>=!~\[;(]", req, maxsplit=1)[0])
    return out


def torch_only(folder: Path) -> list[str]:
    """Link torch, what torch requires (recursively) and setuptools (to build perflab) into
    `folder`: their packages and their metadata, nothing else. Returns the distributions linked."""
    folder.mkdir(parents=True, exist_ok=True)
    todo, seen = ["torch", "setuptools"], []
    while todo:
        name = todo.pop()
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        if dist.metadata["Name"].lower() in seen:
            continue
        seen.append(dist.metadata["Name"].lower())
        base = Path(str(dist.locate_file("")))
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            if top.endswith(".pth") or top == "__pycache__" or not (base / top).exists():
                continue
            link = folder / top
            if not link.exists():
                link.symlink_to(base / top)
        todo += _requirements(dist)
    return seen


@pytest.mark.slow
def test_pip_install_perflab_alone_runs_the_cli(tmp_path):
    # asked of pip's metadata, never by importing or finding the module `pip`: setuptools' distutils
    # hack sees that and gives this whole test process the stdlib distutils, after which every later
    # `import setuptools` in it (torch's cpp_extension, torch.utils.benchmark) fails
    try:
        md.version("pip")
    except md.PackageNotFoundError:
        pytest.skip("pip is not installed")
    env_dir = tmp_path / "venv"
    linked = torch_only(tmp_path / "torch-only")
    assert "torch" in linked and "numpy" not in linked and "pandas" not in linked
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "_torch_only.pth").write_text(str(tmp_path / "torch-only") + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PERFLAB_LOCK_DIR"] = str(tmp_path / "locks")
    # this checkout as a package (not editable, not on PYTHONPATH), with the dependencies it declares
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-compile",
                              "--no-build-isolation", "--disable-pip-version-check", str(ROOT)],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert install.returncode == 0, install.stderr[-2000:]
    where = subprocess.run([str(py), "-c", "import perflab; print(perflab.__file__)"], capture_output=True,
                           text=True, env=env, cwd=tmp_path)
    assert where.stdout.startswith(str(env_dir)), where.stdout + where.stderr
    perflab = str(env_dir / "bin" / "perflab")
    runs = {needle: subprocess.Popen([perflab, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env, cwd=tmp_path)  # both at once: each waits mostly on imports
            for args, needle in ((["env"], "peak"),
                                 (["flops", "--layers", "2", "--hidden", "64", "--heads", "2", "--vocab", "100",
                                   "--seq", "32"], "total"))}
    for needle, proc in runs.items():
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and needle in out, err[-2000:]
        assert "Traceback" not in err
    # nothing of the extras came along; what needs one says which, in one line
    extras = subprocess.run([str(py), "-c", "import importlib.util as u; print([m for m in ('jupyterlab', 'papermill', "
                             "'pytest', 'mkdocs', 'hta', 'playwright', 'ipywidgets') if u.find_spec(m)])"],
                            capture_output=True, text=True, env=env)
    assert extras.stdout.strip() == "[]", extras.stdout + extras.stderr
    grade = subprocess.run([perflab, "grade", str(tmp_path)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert grade.returncode == 2 and grade.stderr.strip().endswith("pip install 'perflab[course]'")
    assert len(grade.stderr.strip().splitlines()) == 1
