"""Find readouts a person should not have to read in an executed notebook.

Two things are flagged in every code cell's outputs (printed text, displayed text and tables, and
what the cell's widgets drew, which nbclient stores in the notebook's widget state):

* a raw dataclass repr, `SomeResult(field=…, …)` (torch module reprs such as `Linear(in_features=…)`
  are a model's description, not a readout, and pass);
* a float with more than 6 significant digits, `0.0316812690461387`;
* an object's repr: `<Figure size 800x180 with 1 Axes>`, `<function f at 0x…>`, `<bound method …>`,
  `<… object at 0x…>` (a figure that should have been drawn, a value that should have been read).

    python tests/readout_scan.py executed/*.ipynb        # prints one line per finding

tests/notebooks/test_notebooks.py runs `scan` on each notebook it has just executed (no second run).
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

MAX_SIGNIFICANT = 6

# A decimal number standing alone: not part of a version (2.13.0), an address (127.0.0.1) or a word.
_FLOAT = re.compile(r"(?<![\w.])(?<!arXiv:)(?<!arXiv )(?<!\d,)[-+]?(\d{1,3}(?:,\d{3})+\.\d+|\d+\.\d+|\.\d+)([eE][-+]?\d+)?(?![\w.]*\d)")
_REPR = re.compile(r"\b([A-Z][A-Za-z0-9_]*)\(([a-z_][a-z0-9_]*)=")
_OBJECT = re.compile(r"<(?:Figure size \d|(?:built-in )?function |bound method |[\w.]+(?: \w+)* object at 0x)[^>]*>")
_TAG = re.compile(r"<[^>]+>")
_WIDGET_REF = re.compile(r"IPY_MODEL_([0-9a-f]+)")


def significant_digits(token: str) -> int:
    mantissa = re.split(r"[eE]", token.lstrip("+-"))[0]
    digits = mantissa.replace(".", "").replace(",", "").lstrip("0")
    return len(digits)


def _torch_module_names() -> set[str]:
    try:
        import torch.nn as nn
    except ImportError:  # pragma: no cover
        return set()
    return {n for n in dir(nn) if n[:1].isupper()}


_ALLOWED_CALLS: set[str] | None = None


def problems_in_text(text: str) -> list[str]:
    """What is wrong in one piece of output text (an empty list when it reads well)."""
    global _ALLOWED_CALLS
    if _ALLOWED_CALLS is None:
        _ALLOWED_CALLS = _torch_module_names()
    found = []
    for m in _REPR.finditer(text):
        if m.group(1) not in _ALLOWED_CALLS:
            found.append(f"raw repr {_excerpt(text, m.start())}")
    for m in _OBJECT.finditer(text):
        found.append(f"object repr {_excerpt(text, m.start())}")
    for m in _FLOAT.finditer(text):
        if significant_digits(m.group(0)) > MAX_SIGNIFICANT:
            found.append(f"unrounded float {m.group(0)} in {_excerpt(text, m.start())}")
    return found


def _excerpt(text: str, at: int, width: int = 70) -> str:
    s = text[max(0, at - 10): at + width].replace("\n", "⏎")
    return repr(s)


def _output_texts(output: dict) -> list[str]:
    kind = output.get("output_type")
    if kind == "stream":
        t = output.get("text", "")
        return ["".join(t) if isinstance(t, list) else t]
    if kind in ("execute_result", "display_data"):
        data = output.get("data", {})
        if "application/vnd.jupyter.widget-view+json" in data:
            return []  # a browser draws the widget; its text/plain fallback is never shown
        if any(mime.startswith("image/") for mime in data):
            return []  # a drawn figure: its text/plain fallback ('<Figure size …>') is never shown
        for mime in ("text/plain", "text/markdown", "text/html"):
            if mime in data:
                t = data[mime]
                t = "".join(t) if isinstance(t, list) else t
                if mime == "text/html":  # a table or a readout: read the cells, not the markup
                    t = html.unescape(_TAG.sub(" ", re.sub(r"(?is)<style.*?</style>", "", t)))
                elif mime == "text/plain" and "text/html" in data and t.startswith("<"):
                    continue
                return [t]
    return []


def _widget_outputs(nb: dict, cell: dict) -> list[dict]:
    """Outputs drawn by the widgets a cell displays: follow the view's children to Output widgets."""
    state = nb.get("metadata", {}).get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    models = state.get("state", {})
    todo = [o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
            for o in cell.get("outputs", [])
            if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    seen, outs = set(), []
    while todo:
        mid = todo.pop()
        if mid in seen or mid not in models:
            continue
        seen.add(mid)
        st = models[mid].get("state", {})
        outs.extend(st.get("outputs", []) if models[mid].get("model_name") == "OutputModel" else [])
        todo.extend(_WIDGET_REF.findall(repr(st.get("children", []))))
    return outs


def scan(nb: dict, name: str = "") -> list[str]:
    """One line per problem: '<name> cell <n> (execution order index): <what>'."""
    lines = []
    code_index = 0
    for index, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        code_index += 1
        outputs = list(cell.get("outputs", [])) + _widget_outputs(nb, cell)
        for output in outputs:
            for text in _output_texts(output):
                for p in problems_in_text(text):
                    first = str(cell.get("source", "")).strip().splitlines()[:1]
                    lines.append(f"{name} cell {index} (code cell {code_index}: {first[0][:50] if first else ''!r}): {p}")
    return lines


def main(argv: list[str]) -> int:
    import nbformat

    bad = 0
    for path in argv:
        for line in scan(nbformat.read(path, as_version=4), Path(path).name):
            print(line)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
