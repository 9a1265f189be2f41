"""The install phase's wheels: which fit the box's Python (by their file names' tags), and how one is
unpacked where pip cannot install."""

from __future__ import annotations

import platform
import re
import subprocess
import sys
import zipfile
from pathlib import Path


def python_version(exe: str) -> tuple[int, int]:
    """The (major, minor) of the Python `exe` (this one's when it cannot be asked)."""
    try:
        r = subprocess.run([exe, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True,
                           timeout=30)
        major, minor = (int(x) for x in r.stdout.split())
        return major, minor
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return sys.version_info[0], sys.version_info[1]


def wheel_fits(name: str, version: tuple[int, int], machine: str | None = None) -> bool:
    """Whether a wheel (by its file name's tags) installs on CPython `version` on Linux `machine`:
    pure (py3, any), or compiled for this minor version, or abi3 for this one or an older one."""
    machine = machine or platform.machine()
    parts = name[:-len(".whl")].split("-")
    if len(parts) < 5:
        return False
    py_tags, abi, plats = parts[-3].split("."), parts[-2], parts[-1].split(".")
    here = version[0] * 100 + version[1]

    def py_ok(tag: str) -> bool:
        m = re.fullmatch(r"(cp|py)(\d)(\d*)", tag)
        if not m:
            return False
        if not m.group(3):
            return int(m.group(2)) == version[0]
        v = int(m.group(2)) * 100 + int(m.group(3))
        return v <= here if (m.group(1) == "py" or abi == "abi3") else v == here

    plat_ok = any(p == "any" or (p.startswith(("manylinux", "linux", "musllinux")) and p.endswith("_" + machine))
                  for p in plats)
    return plat_ok and any(py_ok(t) for t in py_tags)


def unpack_wheel(wheel: Path, site: Path) -> None:
    """Install a wheel by unpacking it, as pip --target would lay it out (its purelib/platlib data
    folders merged in; scripts and headers left out): for a box whose pip cannot install."""
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            parts = info.filename.split("/")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            dest = site.joinpath(*parts)
            if info.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(z.read(info))
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                dest.chmod(mode)
