"""The one archive DIR holds: the work folder packed (the installed wheels and kernel files left out),
the executed notebooks' pictures dropped when it is too large, and cut into parts a GPU box hands back."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

PART_BYTES = 15 * 2**20  # a GPU box hands back files of at most 16 MiB: the archive is split below that
MAX_PARTS = 6  # with summary.json, at most 7 files in DIR


def strip_images(path: Path) -> None:
    try:
        nb = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    for cell in nb.get("cells", []):
        for o in cell.get("outputs", []):
            for key in [k for k in o.get("data", {}) if k.startswith("image/")]:
                o["data"][key] = "(image left out: the archive was over its size)"
    path.write_text(json.dumps(nb))


def pack(work: Path, archive: Path) -> None:
    with tarfile.open(archive, "w:gz") as tar:
        for p in sorted(work.rglob("*")):
            rel = p.relative_to(work)
            if p.is_file() and rel.parts[0] not in ("site", "jupyter"):  # the installed wheels and kernel files
                tar.add(p, arcname=str(Path("gpu-check") / rel))


def split(archive: Path, part: int, max_parts: int) -> list[str]:
    """Cut `archive` into parts of `part` bytes (name.00, .01, ...) when larger; the last parts are
    dropped beyond `max_parts` (the summary says so). Returns the file names left in its folder."""
    size = archive.stat().st_size
    if size <= part:
        return [archive.name]
    names = []
    with open(archive, "rb") as f:
        for i in range(max_parts):
            chunk = f.read(part)
            if not chunk:
                break
            (archive.parent / f"{archive.name}.{i:02d}").write_bytes(chunk)
            names.append(f"{archive.name}.{i:02d}")
        if f.read(1):
            names.append(f"(truncated: {size} bytes, {max_parts} parts of {part} kept)")
    archive.unlink()
    return names
