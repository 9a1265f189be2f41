#!/usr/bin/env python3
"""Download the wheels an offline GPU box lacks to execute the course's notebooks, into `.whl/`.

    python tools/gpu_wheels.py                       # Python 3.12, Linux x86_64, into ./.whl
    python tools/gpu_wheels.py --python 3.11 --dest /media/usb/.whl
    python tools/gpu_wheels.py --box-freeze box.txt  # leave out exactly what `pip freeze` there lists

(`make gpu-wheels [PY=3.12]` runs the first.) A GPU box usually comes with its own Python, torch (a
CUDA build), triton, numpy and the rest of a training stack, and reaches no package index. What it
lacks to run the notebooks headless is the Jupyter side: papermill, ipykernel, ipywidgets, nbclient,
nbformat and ipyexperiments. This script downloads those and their dependencies (wheels only, for
the target Python on manylinux; tools/wheelhouse.py's tags), then deletes every wheel of a package
the box already has, so that nothing there is shadowed: torch and everything in BOX below, with the
packages those need (pip's resolver works that out here, from the same index, for the same target),
or exactly the names of `--box-freeze` (`python3 -m pip freeze` run on the box). The `pynvml` wheel
is dropped too: it is a deprecation shim over nvidia-ml-py that makes every `import torch` warn.

On the box, `python3 tools/gpu_check` installs the folder into a target folder of its own output
(`pip install --no-index --no-deps --target`), never into the box's Python: README, "GPU".
Standard library only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("wheelhouse", Path(__file__).with_name("wheelhouse.py"))
assert _spec is not None and _spec.loader is not None
wheelhouse = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wheelhouse)

# what the notebooks need beyond perflab's own dependencies (pyproject.toml's `course` extra without
# JupyterLab, which a headless run does not use; nbclient and nbformat are papermill's engine)
NEEDED = ["papermill", "ipykernel", "ipywidgets", "ipyexperiments", "nbclient", "nbformat"]
# the GPU machine this course is checked on (a Python 3.12 venv with torch 2.11+cu130): what it has
BOX = ["torch", "triton", "numpy", "pandas", "matplotlib", "pytest", "pytest-xdist", "pytest-timeout",
       "pytest-cov", "hypothesis", "transformers", "psutil", "tqdm", "nvidia-ml-py"]
NEVER = {"torch", "pynvml"}  # the box's own CUDA build; the deprecation shim


def canonical(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503): lower case, runs of -_. as one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name(path: Path) -> str:
    """The distribution a wheel file holds (the part of its name before the version)."""
    return canonical(path.name.split("-", 1)[0])


def freeze_names(text: str) -> set[str]:
    """Distribution names in `pip freeze` / `pip list --format=freeze` output (`name==1.0`, `name @ url`)."""
    out = set()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "-")):
            out.add(canonical(re.split(r"\s*(?:==|===|@|>=|<=|~=|\s)", line, maxsplit=1)[0]))
    return out


def resolved_box(python: str, arch: str) -> set[str] | None:
    """The names pip installs for BOX (torch apart: its pure-Python requirements instead, as
    tools/wheelhouse.py lists them; its CUDA wheels are not on every index) for the target: what
    the box already has. None when pip cannot resolve it (no index): then BOX's own names are used."""
    reqs = [b for b in BOX if b != "torch"] + wheelhouse.TORCH_RUNTIME
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        exe = wheelhouse.target_python(python) or sys.executable
        cmd = [exe, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--dry-run", "--ignore-installed",
               "--report", str(report), "--target", str(Path(tmp) / "t"), *wheelhouse.target_args(python, arch), *reqs]
        print("[gpu-wheels] resolving what the box has: " + " ".join(BOX), flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode or not report.exists():
            print("[gpu-wheels] warning: could not resolve the box's packages here (" +
                  (r.stderr.strip().splitlines() or ["no report"])[-1] + "): leaving out BOX's own names only",
                  flush=True)
            return None
        return {canonical(i["metadata"]["name"]) for i in json.loads(report.read_text())["install"]}


def prune(dest: Path, present: set[str]) -> list[str]:
    """Delete the wheels of packages the box has (and NEVER); return the names removed."""
    gone = []
    for w in sorted(dest.glob("*.whl")):
        if wheel_name(w) in present | NEVER:
            w.unlink()
            gone.append(wheel_name(w))
    return gone


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default="3.12", help="the GPU box's Python, e.g. 3.12 (default 3.12)")
    ap.add_argument("--arch", default="x86_64", help="x86_64 (default) or aarch64")
    ap.add_argument("--dest", default=str(ROOT / ".whl"), help="the folder (default ./.whl, git-ignored)")
    ap.add_argument("--box-freeze", metavar="FILE",
                    help="`python3 -m pip freeze` of the box: leave out exactly those packages")
    args = ap.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python):
        print(f"[gpu-wheels] --python {args.python!r}: give a version like 3.12", file=sys.stderr)
        return 2
    present = {canonical(b) for b in BOX}
    if args.box_freeze:
        try:
            present = freeze_names(Path(args.box_freeze).read_text())
        except OSError as e:
            print(f"[gpu-wheels] --box-freeze: cannot read {args.box_freeze} ({e.strerror})", file=sys.stderr)
            return 2
    else:
        present |= resolved_box(args.python, args.arch) or set()
    dest = Path(args.dest)
    for old in dest.glob("*.whl"):  # a folder made for another Python or box must not leave wheels behind
        old.unlink()
    rc = wheelhouse.download(dest, args.python, args.arch, NEEDED)
    if rc:
        print("[gpu-wheels] pip download failed (see above)", file=sys.stderr)
        return rc
    gone = prune(dest, present)
    wheels = sorted(dest.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels)
    print(f"[gpu-wheels] left out (the box has them): {', '.join(gone) or 'none'}")
    print(f"[gpu-wheels] {dest}: {len(wheels)} wheels, {size / 1e6:.0f} MB, for CPython {args.python} on "
          f"manylinux {args.arch}; on the box: python3 tools/gpu_check --out DIR")
    return 0


if __name__ == "__main__":
    sys.exit(main())
