"""What the grader reads back from a learner's run, and how: never more than evidence that can
lower a grade.

The learner's kernel runs the notebook with the grader's own last cell added (`GRADE_CELL`, which
prints `MARK`); afterwards the grader reads what the run left in the learner's folder, each file
only as a regular file, never through a symbolic link, bounded in bytes (`read_left`):

* the executed notebook (`load_notebook`, bounded in bytes and cells), whose first error output, a
  missing end mark or a deleted check cell can only lower the grade (`classify`);
* the runner's log, for the line that says why a kernel died (`last_line`), and the cell that was
  running at a timeout (`running_cell`);
* the learner's predictions (`read_predictions`: the known fields of each JSON line, nothing else).

Every message is cleaned of control characters and escape sequences before it is printed
(`clean`, `first_line`).
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from perflab.classroom.submissions import Lab

MARK = "PERFLAB-GRADE "  # what the grader's own last cell prints: the notebook ran to its end (nothing more)
GRADE_CELL = (
    "# added by perflab grade: the notebook ran to its end\n"
    f"print({MARK!r} + 'end')\n"
)
PREDICTION_FIELDS = ("lesson", "key", "question", "unit", "predicted", "measured", "error_pct", "device", "time")


def need_papermill():
    from perflab.core.extras import need

    what = "grading runs the notebooks with papermill"
    return need("papermill", "course", what), need("nbformat", "course", what)


def first_line(text: str) -> str:
    text = clean(str(text), keep_lines=True).strip()
    return text.splitlines()[0].strip() if text else ""


def clean(text: str, keep_lines: bool = False) -> str:
    """`text` without terminal escape sequences or control characters (a learner's message is
    printed to the teacher's terminal); line breaks kept where asked."""
    text = re.sub(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])", "", str(text))
    keep = "\n" if keep_lines else ""
    return "".join(ch for ch in text if ch in keep or (ch.isprintable() and ch not in "\u2028\u2029")
                   or ch == " ")


def load_notebook(source: Path | bytes) -> tuple[Any, str]:
    """(notebook, '') or (None, why it cannot be run); bounded in bytes and cells (judge.read_notebook)."""
    import warnings

    from perflab.classroom.answer_source import read_notebook

    _, nbformat = need_papermill()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # cells without ids (older Jupyter) are fine to run
        try:
            data = source if isinstance(source, bytes) else Path(source).read_bytes()
            read_notebook(data)  # within its bounds before nbformat builds it
            nb = nbformat.reads(data.decode("utf-8"), as_version=4)
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
    for cell in nb.cells:
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


def removed_checks(nb: Any, lab: Lab) -> list[str]:
    """The shipped lab's check calls that the notebook no longer makes (read from its source)."""
    cells = nb.cells if hasattr(nb, "cells") else nb.get("cells", [])
    code = "\n".join("".join(c.get("source", "")) for c in cells if c.get("cell_type") == "code")
    return [c for c in lab.checks if not re.search(rf"lab\.{c}\(", code)]


def read_predictions(results: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    data = read_left(results / "predictions.jsonl", 2**20)
    for line in (data or b"").decode(errors="replace").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append({k: item.get(k) for k in PREDICTION_FIELDS})
    return out



def running_cell(nb: Any) -> str:
    """' (cell N: its first line)' for the cell papermill was running when the run stopped; '' for none."""
    if nb is None:
        return ""
    for i, cell in enumerate(nb.cells):
        status = cell.get("metadata", {}).get("papermill", {}).get("status")
        if status == "running":
            line = next((ln for ln in "".join(cell.get("source", "")).splitlines() if ln.strip()
                         and not ln.lstrip().startswith("#")), "")
            return f" (cell {i}: {line.strip()[:60]})"
    return ""


def read_left(path: Path, limit: int) -> bytes | None:
    """A file the learner's sandbox could write (its results, the executed notebook, the runner's
    log), read by the unconfined grader: only a regular file, never through a symbolic link (which
    would point at a file of the grader's own view: a FIFO that blocks, /proc/kcore), at most `limit`
    bytes (the last ones). None where it is not such a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None
        f.seek(max(0, st.st_size - limit))
        return f.read(limit)


def last_line(path: Path) -> str:
    """The line of the runner's log that says what went wrong (its last error line, else its last line)."""
    data = read_left(path, 2**20)
    if data is None:
        return "no output"
    lines = [ln for ln in data.decode(errors="replace").splitlines()
             if ln.strip() and "WARNING | Kernel is running over TCP" not in ln]
    errors = [ln for ln in lines if re.search(r"(Error|Exception|died)\b", ln)]
    return first_line((errors or lines or ["no output"])[-1])[:200]
