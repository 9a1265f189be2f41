#!/usr/bin/env python3
"""Write a clean .ipynb from a percent-format script (the authoring format of the lessons).

    python tools/nbwrite.py lesson.py notebooks/NN_topic.ipynb
    python tools/nbwrite.py --back notebooks/NN_topic.ipynb lesson.py   # notebook -> script, to edit

Cells start with `# %%` (code), `# %% [markdown]` (markdown: each line's leading '# ' is removed),
or `# %% tags=["parameters"]` (the papermill parameters cell).
"""

import json
import re
import sys
import uuid

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def to_notebook(text: str) -> dict:
    cells, cur = [], None
    for line in text.splitlines():
        m = re.match(r"^# %%(.*)$", line)
        if m:
            if cur:
                cells.append(cur)
            rest = m.group(1)
            kind = "markdown" if "[markdown]" in rest else "code"
            tags = re.findall(r'"([^"]+)"', rest.split("tags=", 1)[1]) if "tags=" in rest else []
            cur = {"kind": kind, "tags": tags, "lines": []}
            continue
        if cur is None:
            continue
        if cur["kind"] == "markdown":
            line = line[2:] if line.startswith("# ") else ("" if line.strip() == "#" else line)
        cur["lines"].append(line)
    if cur:
        cells.append(cur)
    out = []
    for c in cells:
        lines = c["lines"]
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        src = [ln + "\n" for ln in lines]
        if src:
            src[-1] = src[-1].rstrip("\n")
        meta = {"tags": c["tags"]} if c["tags"] else {}
        cell = {"cell_type": c["kind"], "id": uuid.uuid5(uuid.NAMESPACE_URL, "".join(src) + str(len(out))).hex[:8],
                "metadata": meta, "source": src}
        if c["kind"] == "code":
            cell.update(execution_count=None, outputs=[])
        out.append(cell)
    return {"cells": out, "metadata": {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def to_script(nb: dict) -> str:
    parts = []
    for c in nb["cells"]:
        src = "".join(c["source"])
        tags = c.get("metadata", {}).get("tags", [])
        if c["cell_type"] == "markdown":
            parts.append("# %% [markdown]\n" + "\n".join(("# " + ln) if ln else "#" for ln in src.split("\n")))
        else:
            head = "# %%" + (f" tags={json.dumps(tags)}" if tags else "")
            parts.append(head + "\n" + src)
    return "\n\n".join(parts) + "\n"


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "--back":
        nb = json.load(open(args[1]))
        open(args[2], "w").write(to_script(nb))
        return
    src, dst = args
    nb = to_notebook(open(src).read())
    with open(dst, "w") as f:
        json.dump(nb, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
