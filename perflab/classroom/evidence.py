"""What the grader reads back from a learner's run, and how: never more than evidence that can
lower a grade.

The learner's kernel runs the notebook with the grader's own last cell added (`GRADE_CELL`, which
prints `MARK`); afterwards what the run left in the learner's folder is read, each file only as a
regular file, never through a symbolic link, bounded in bytes (`read_left`), and **parsed in a
limited process** (`examine`: this file run by a trusted Python in the learner's cgroup, under an
address-space limit, so that a notebook built to exhaust a parser exhausts only that process):

* the executed notebook (bounded in bytes and cells), whose first error output, a missing end mark
  or a deleted check cell can only lower the grade (`classify`), and the cell that was running at a
  timeout (`running_cell`);
* the learner's predictions (`read_predictions`: the known fields of each JSON line, nothing else).

The runner's output reaches the grader through a pipe, its last MiB kept, for the line that says
why a kernel died (`last_line`). Every message is cleaned of control characters and escape
sequences before it is printed, and a learner's name is shown with its invisible characters
escaped (`perflab.classroom.shown`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from perflab.classroom.boxes import read_capped
from perflab.classroom.shown import first_line

if TYPE_CHECKING:
    from perflab.classroom.submissions import Lab

MARK = "PERFLAB-GRADE "  # what the grader's own last cell prints: the notebook ran to its end (nothing more)
GRADE_CELL = (
    "# added by perflab grade: the notebook ran to its end\n"
    f"print({MARK!r} + 'end')\n"
)
PREDICTION_FIELDS = ("lesson", "key", "question", "unit", "predicted", "measured", "error_pct", "device", "time")


def need_papermill(*, alone: bool = False):
    """papermill and nbformat, or one line that says how to install them.

    `alone=True` is for a process of the grader's that runs nothing else (the runner): nbformat
    validates with jsonschema, whose import builds an IRI grammar (`rfc3987_syntax`, about 0.8 s,
    once per submission) for a string format no notebook schema asks for and nbformat never checks,
    so that process goes without it."""
    from perflab.core.extras import need

    if alone:
        # None in sys.modules: `import rfc3987_syntax` raises ImportError, as where it is not installed
        sys.modules.setdefault("rfc3987_syntax", None)  # pyright: ignore[reportArgumentType]
    what = "grading runs the notebooks with papermill"
    return need("papermill", "course", what), need("nbformat", "course", what)


def runnable(raw: Any) -> Any:
    """A submitted notebook's JSON with only what running it needs: each cell's type, source and tags
    (papermill finds the `parameters` cell by its tag); no outputs, no other metadata. A learner's
    4 MiB of cell metadata would otherwise be parsed, validated and written again at every cell papermill
    runs (minutes for one learner). Anything that is not a notebook's shape is left for the validator."""
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
        return raw
    out = dict(raw)
    spec = raw.get("metadata", {}).get("kernelspec") if isinstance(raw.get("metadata"), dict) else None
    out["metadata"] = ({"kernelspec": {k: spec[k] for k in ("name", "display_name", "language")
                                       if isinstance(spec.get(k), str) and len(spec[k]) <= 200}}
                       if isinstance(spec, dict) and isinstance(spec.get("name"), str) else {})
    cells = []
    for c in raw["cells"]:
        if isinstance(c, dict):
            c = dict(c)
            meta = c.get("metadata")
            tags = meta.get("tags") if isinstance(meta, dict) else None
            c["metadata"] = {"tags": [t for t in tags[:16] if isinstance(t, str) and len(t) <= 100]} \
                if isinstance(tags, list) else {}
            if c.get("cell_type") == "code":
                c["outputs"] = []
            c.pop("attachments", None)
        cells.append(c)
    out["cells"] = cells
    return out


def load_notebook(source: Path | bytes) -> tuple[Any, str]:
    """(notebook, '') or (None, why it cannot be run); bounded in bytes and cells (judge.read_notebook)."""
    import warnings

    from perflab.classroom.answer_source import read_notebook

    _, nbformat = need_papermill()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # cells without ids (older Jupyter) are fine to run
        try:
            data = source if isinstance(source, bytes) else Path(source).read_bytes()
            raw = runnable(read_notebook(data))  # within its bounds before nbformat builds it
            nb = nbformat.reads(json.dumps(raw), as_version=4)
        except Exception as e:  # JSON errors, a notebook of an unknown format, a file that is not text
            return None, f"malformed notebook ({first_line(str(e)) or type(e).__name__})"
        try:
            nbformat.validate(nb)
        except Exception as e:
            return None, f"malformed notebook ({first_line(str(e))[:120]})"
    if not any(c.get("cell_type") == "code" for c in nb.cells):
        return None, "malformed notebook (no code cells)"
    return nb, ""


def classify(nb: Any, lab: Lab) -> tuple[str, str]:
    """What the learner's own kernel run says, which can only take a grade *down*: its first error
    output ('wrong' for a check's LabCheckError, else 'error'), a run that stopped before the
    grader's last cell, a check cell removed. ('ran', '') otherwise: the verdict is the judge's.

    The states the kernel printed are not read: the learner's code could have written them."""
    ended = False
    for cell in _cells(nb):
        if cell.get("cell_type") != "code":
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                ename, evalue = str(out.get("ename", "")), str(out.get("evalue", ""))
                if ename == "LabCheckError":
                    return "wrong", first_line(evalue)
                return "error", f"{ename}: {first_line(evalue)}" if evalue.strip() else ename
            if out.get("output_type") == "stream":
                ended = ended or any(line.strip() == MARK + "end" for line in "".join(out.get("text", "")).splitlines())
    if not ended:
        return "error", "the notebook stopped before its end (the kernel died or the file was changed while it ran)"
    removed = removed_checks(nb, lab)
    if removed:
        return "not done", f"check cell removed: {', '.join(removed)}"
    return "ran", ""


def _cells(nb: Any) -> list[Any]:
    cells = nb.get("cells", []) if isinstance(nb, dict) else getattr(nb, "cells", [])
    return [c for c in cells if isinstance(c, dict)] if isinstance(cells, list) else []


def removed_checks(nb: Any, lab: Lab) -> list[str]:
    """The shipped lab's check calls that the notebook no longer makes (read from its source)."""
    code = "\n".join(_source(c) for c in _cells(nb) if c.get("cell_type") == "code")
    return [c for c in lab.checks if not re.search(rf"lab\.{c}\(", code)]


def _source(cell: Any) -> str:
    src = cell.get("source", "")
    return "".join(x for x in src if isinstance(x, str)) if isinstance(src, list) else str(src)


def read_predictions(results: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    data = read_left(results / "predictions.jsonl", 2**20)
    for line in (data or b"").decode(errors="replace").splitlines():
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(item, dict):
            out.append({k: item.get(k) for k in PREDICTION_FIELDS})
    return out



def running_cell(nb: Any) -> str:
    """' (cell N: its first line)' for the cell papermill was running when the run stopped; '' for none."""
    if nb is None:
        return ""
    for i, cell in enumerate(_cells(nb)):
        meta = cell.get("metadata", {})
        pm = meta.get("papermill", {}) if isinstance(meta, dict) else {}
        if isinstance(pm, dict) and pm.get("status") == "running":
            line = next((ln for ln in _source(cell).splitlines() if ln.strip()
                         and not ln.lstrip().startswith("#")), "")
            return f" (cell {i}: {line.strip()[:60]})"
    return ""


def read_left(path: Path, limit: int) -> bytes | None:
    """A file the learner's sandbox could write (its results, the executed notebook), read by the
    unconfined grader: only a regular file, never through a symbolic link (which would point at a
    file of the grader's own view: a FIFO that blocks, /proc/kcore, a library), at most `limit`
    bytes (the last ones). None where it is not such a file (boxes.read_capped)."""
    return read_capped(path, limit)


def last_line(log: Path | str) -> str:
    """The line of the runner's log (a file, or its text) that says what went wrong: its last error
    line, else its last line."""
    data = read_left(log, 2**20) if isinstance(log, Path) else str(log).encode()
    if not data:
        return "no output"
    lines = [ln for ln in data.decode(errors="replace").splitlines()
             if ln.strip() and "WARNING | Kernel is running over TCP" not in ln]
    errors = [ln for ln in lines if re.search(r"(Error|Exception|died)\b", ln)]
    return first_line((errors or lines or ["no output"])[-1])[:200]


# ----------------------------------------------------------------------------- parsed in a limited process
@dataclass
class Evidence:
    """What a learner's run left, as read by `examine`: the kernel's outcome ('ran' when nothing
    lowers the grade; None where no executed notebook could be read), its message, the cell
    running when the run stopped, and the predictions."""

    outcome: str | None = None
    message: str = ""
    running: str = ""
    predictions: list[dict[str, Any]] = field(default_factory=list)


PARSE_BYTES = 2**30  # the address space the parsing process may use


def examine(executed: Path, results: Path | None, checks: Sequence[str], *, wrap: Any = None,
            timeout: float = 120.0) -> Evidence:
    """Read and parse what the run left in a trusted Python of its own (this file as a script),
    limited in address space (`PARSE_BYTES`), CPU time and wall time, started through `wrap` (the
    learner's cgroup); an empty Evidence where it fails."""
    from perflab.classroom.worker import trusted_python

    cmd = [*trusted_python(__file__), str(executed), str(results or ""), json.dumps(list(checks))]
    if wrap is not None:
        cmd = wrap(cmd)
    try:
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                             env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        got = json.loads(out.stdout.decode(errors="replace").strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return Evidence()
    if not isinstance(got, dict):
        return Evidence()
    preds = [p for p in got.get("predictions", []) if isinstance(p, dict)]
    outcome = got.get("outcome")
    return Evidence(outcome if isinstance(outcome, str) else None, str(got.get("message", "")),
                    str(got.get("running", "")), preds)


def _examine_here(executed: str, results: str, checks: list[str]) -> dict[str, Any]:
    from perflab.classroom.answer_source import MAX_NOTEBOOK_BYTES, read_notebook

    out: dict[str, Any] = {"predictions": read_predictions(Path(results)) if results else []}
    data = read_left(Path(executed), MAX_NOTEBOOK_BYTES + 2**20)  # a notebook's bound, and its outputs
    if data is None:
        return out
    try:
        nb = read_notebook(data)
    except (ValueError, RecursionError, MemoryError):  # the runner was killed while writing it; a parser bomb
        return out
    outcome, message = classify(nb, SimpleNamespace(checks=tuple(checks)))  # type: ignore[arg-type]
    out.update(outcome=outcome, message=message, running=running_cell(nb))
    return out


def main(argv: list[str]) -> int:
    """`examine`'s process: EXECUTED RESULTS CHECKS_JSON → one JSON line."""
    import resource

    for which, value in ((resource.RLIMIT_AS, PARSE_BYTES), (resource.RLIMIT_CPU, 60), (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass
    try:
        got = _examine_here(argv[0], argv[1], [str(c) for c in json.loads(argv[2])])
    except MemoryError:
        got = {}
    sys.stdout.write(json.dumps(got) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:4]))
