"""Strip outputs, execution counts and kernel metadata from notebooks (what git should hold).

    python -m perflab.course.nbclean notebooks labs        # clean in place
    python -m perflab.course.nbclean --check notebooks labs  # exit 1 and list dirty notebooks
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KEEP_NB_META = {"language_info"}
# The generic kernel every Jupyter has, so JupyterLab opens a lesson without asking which kernel.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def is_clean(nb: dict) -> bool:
    for c in nb.get("cells", []):
        if c.get("cell_type") == "code" and (c.get("outputs") or c.get("execution_count") is not None):
            return False
        if "execution" in c.get("metadata", {}):
            return False
    meta = nb.get("metadata", {})
    if meta.get("kernelspec", KERNELSPEC) != KERNELSPEC:
        return False
    return not ({"widgets", "papermill"} & set(meta))


def clean(nb: dict) -> dict:
    for c in nb.get("cells", []):
        if c.get("cell_type") == "code":
            c["outputs"] = []
            c["execution_count"] = None
        for k in ("execution", "papermill", "collapsed", "scrolled"):
            c.get("metadata", {}).pop(k, None)
    meta = {k: v for k, v in nb.get("metadata", {}).items() if k in KEEP_NB_META}
    meta["kernelspec"] = dict(KERNELSPEC)
    nb["metadata"] = meta
    return nb


def notebooks(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(p.rglob("*.ipynb")) if p.is_dir() else [p]
    return [p for p in out if ".ipynb_checkpoints" not in p.parts]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    args = [a for a in args if a != "--check"] or ["notebooks", "labs"]
    dirty = []
    for path in notebooks(args):
        nb = json.loads(path.read_text())
        if is_clean(nb):
            continue
        dirty.append(path)
        if not check:
            path.write_text(json.dumps(clean(nb), indent=1, ensure_ascii=False) + "\n")
    for p in dirty:
        print(("dirty: " if check else "cleaned: ") + str(p))
    return 1 if (check and dirty) else 0


if __name__ == "__main__":
    sys.exit(main())
