#!/usr/bin/env python3
"""Download every wheel the course needs, except torch, for a box with no package index.

    python tools/wheelhouse.py --python 3.12                  # ./wheelhouse, for Linux x86_64
    python tools/wheelhouse.py --python 3.11 --arch aarch64 --dest /media/usb/wheelhouse
    python tools/wheelhouse.py --check --python 3.12          # does ./wheelhouse resolve offline?

(`make wheelhouse PY=3.12` runs the first.) The list is pyproject.toml's dependencies and all its
extras (course, test, site, hta, dev: what `make test` installs), without torch (a GPU box keeps its own CUDA build), plus setuptools, which
`pip install -e .` needs to build perflab, and torch's own pure-Python requirements (so a box can
also install a torch wheel it already has). Wheels only (`--only-binary=:all:`), for the target
Python and platform, whatever Python and platform run this script. Then, on the offline box:

    PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/wheelhouse make test

`--check` asks pip to resolve the whole list from the folder alone (`pip install --no-index
--dry-run`, pip's own config and environment ignored), installing nothing: it fails, naming the
missing package, when a wheel is missing. Standard library only.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEAVE_OUT = {"torch"}  # the box's own build is kept (CUDA on a GPU box)
BUILD = ["setuptools>=64"]  # pyproject's build-system: `pip install -e .` builds perflab from it
# torch's own pure-Python requirements (torch 2.13's Requires-Dist), so that a box which installs a
# torch wheel it already has (tools/setup_env.py's local wheel folder) can do that offline too
TORCH_RUNTIME = ["filelock", "typing-extensions>=4.10.0", "sympy>=1.13.3", "networkx>=2.5.1", "jinja2",
                 "fsspec>=0.8.5"]
# manylinux tags pip may pick for a current Linux (glibc ≥ 2.28); older-glibc wheels work there too
GLIBC = ("2_17", "2_24", "2_27", "2_28")


def _array(text: str, name: str) -> list[str]:
    m = re.search(rf"^{re.escape(name)}\s*=\s*\[(.*?)\]", text, re.S | re.M)
    return re.findall(r'"([^"]+)"', m.group(1)) if m else []


def extra_names(text: str) -> list[str]:
    """The extras pyproject.toml defines ([project.optional-dependencies])."""
    section = text.split("[project.optional-dependencies]", 1)[-1].split("\n[", 1)[0]
    return re.findall(r"^([A-Za-z0-9_-]+)\s*=\s*\[", section, re.M)


def requirements(root: Path = ROOT, extras: tuple[str, ...] | None = None) -> list[str]:
    """pyproject.toml's dependencies and `extras` (default: all of them), torch left out, plus the
    build backend and torch's pure-Python requirements."""
    text = (root / "pyproject.toml").read_text()
    deps = _array(text, "dependencies")
    for extra in extra_names(text) if extras is None else extras:
        deps += _array(text, extra)
    if not deps:
        raise SystemExit("no dependencies found in pyproject.toml")
    keep = [d for d in deps if re.split(r"[\s<>=!~\[;]", d, maxsplit=1)[0].lower() not in LEAVE_OUT]
    return keep + BUILD + TORCH_RUNTIME


def platforms(arch: str) -> list[str]:
    """The --platform tags of a Linux box of this architecture."""
    return [f"manylinux_{g}_{arch}" for g in GLIBC] + [f"manylinux2014_{arch}", f"linux_{arch}"]


def target_args(python: str, arch: str) -> list[str]:
    out = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
    for p in platforms(arch):
        out += ["--platform", p]
    return out


def download(dest: Path, python: str, arch: str, reqs: list[str]) -> int:
    dest.mkdir(parents=True, exist_ok=True)
    # pip evaluates dependencies' markers (`aiohttp; python_version == "3.12"`) for the Python that
    # runs it, whatever --python-version says: run the target version's pip when there is one
    exe = target_python(python)
    if exe is None:
        print(f"[wheelhouse] warning: no python{python} here; dependencies that only the target Python needs "
              "(environment markers) may be missing: --check on the target box will say", flush=True)
    cmd = [exe or sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--dest", str(dest),
           *target_args(python, arch), *reqs]
    print("[wheelhouse] $ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd).returncode


def target_python(python: str) -> str | None:
    """An interpreter of the target version here (`python3.12` on PATH), or None."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == python:
        return sys.executable
    found = [shutil.which(f"python{python}")] + sorted(Path.home().glob(f".pyenv/versions/{python}.*/bin/python"))
    for exe in filter(None, found):
        r = subprocess.run([str(exe), "-m", "pip", "--version"], capture_output=True, text=True)
        if r.returncode == 0:
            return str(exe)
    return None


def check(dest: Path, python: str, arch: str, reqs: list[str]) -> subprocess.CompletedProcess:
    """Resolve `reqs` from `dest` alone (no index, pip's config and environment ignored); installs nothing.

    pip checks a wheel's Requires-Python against the Python that runs it, so the check runs under
    the target version when one is installed here; otherwise under this Python with
    --ignore-requires-python (compiled wheels are still matched by their cpXY tags), and says so.
    """
    exe = target_python(python)
    extra = [] if exe else ["--ignore-requires-python"]
    with_target = ["--target", str(dest / ".dry-run-target")]  # pip wants one with a foreign --platform; not written
    cmd = [exe or sys.executable, "-m", "pip", "--isolated", "install", "--disable-pip-version-check", "--dry-run",
           "--ignore-installed", "--no-index", "--find-links", str(dest), *target_args(python, arch), *with_target,
           *extra, *reqs]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if not exe:
        r.stdout += f"\n(no python{python} here: Requires-Python of pure-Python wheels not checked)\n"
    return r


def main(argv: list[str] | None = None) -> int:
    import platform

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                    help="the target box's Python, e.g. 3.12 (default: this one)")
    ap.add_argument("--arch", default=platform.machine() or "x86_64", help="x86_64 (default here) or aarch64")
    ap.add_argument("--dest", default=str(ROOT / "wheelhouse"), help="the folder (default ./wheelhouse)")
    ap.add_argument("--check", action="store_true", help="only check that the folder resolves offline")
    args = ap.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python):
        print(f"[wheelhouse] --python {args.python!r}: give a version like 3.12", file=sys.stderr)
        return 2
    dest = Path(args.dest)
    reqs = requirements()
    if not args.check:
        rc = download(dest, args.python, args.arch, reqs)
        if rc:
            print("[wheelhouse] pip download failed (see above): a package may have no wheel for this Python "
                  "and platform", file=sys.stderr)
            return rc
    r = check(dest, args.python, args.arch, reqs)
    if r.returncode:
        print(r.stdout[-2000:] + r.stderr[-2000:], file=sys.stderr)
        print(f"[wheelhouse] {dest} does not resolve offline for Python {args.python} on {args.arch}", file=sys.stderr)
        return 1
    if "not checked" in r.stdout:
        print("[wheelhouse]" + r.stdout.strip().splitlines()[-1])
    n = len(list(dest.glob("*.whl")))
    print(f"[wheelhouse] {dest}: {n} wheels; every requirement resolves offline for Python {args.python} "
          f"on {args.arch} (torch left out: the box keeps its own)")
    print(f"[wheelhouse] on the offline box: PIP_NO_INDEX=1 PIP_FIND_LINKS={dest.resolve()} make test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
