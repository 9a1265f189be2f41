import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ruff() -> str:
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install -e .[dev])")
    return ruff


def test_ruff_clean():
    r = subprocess.run([_ruff(), "check", "perflab", "tests", "tools"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_sees_every_python_file_of_the_package():
    # ruff skips folders by name (its default excludes: build, dist, .venv, ...): a package folder with
    # such a name would never be linted, as perflab/dist was not, and nothing would say so
    r = subprocess.run([_ruff(), "check", "--show-files", "perflab", "tests", "tools"], cwd=ROOT,
                       capture_output=True, text=True)
    seen = {Path(line.strip()).resolve() for line in r.stdout.splitlines() if line.strip().endswith(".py")}
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    ours = {(ROOT / f).resolve() for f in tracked if f.split("/")[0] in {"perflab", "tests", "tools"} and (ROOT / f).exists()}
    if not tracked:
        pytest.skip("not a git checkout: no list of the package's files to compare")
    missing = sorted(str(p.relative_to(ROOT)) for p in ours - seen)
    assert not missing, f"ruff does not lint {len(missing)} file(s): {missing[:10]}"
