"""A recommendation that agrees with the measured rows it sits under (lesson 07's live panel).

The model's recommendation (`starvation.recommend`) says how many workers *should* hide loading;
`measured_verdict` reads the sweep just measured and says whether they *did*: a worker count whose
measured wait is above HIDDEN of the step is not called hidden, whatever the model says, and a worker
count measured while other programs used the cores (its row's `quietness`) is called neither: it says
"inconclusive: the machine was busy (…)" (`perflab.core.verdicts.busy_text`).
"""

from __future__ import annotations

from typing import Any

from perflab.core.quietness import as_quietness
from perflab.core.verdicts import busy_text

HIDDEN = 0.10  # a wait below 10% of the step counts as hidden behind compute


def _ms(seconds: float) -> str:
    """Milliseconds with the two significant digits a shared machine's timing supports, no padded zeros."""
    return f"{float(seconds) * 1e3:.2g} ms"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def measured_verdict(frame: Any, model_reason: str = "") -> str:
    """One paragraph: for each measured worker count, its wait as a share of the step and whether that
    is hidden; then the model's recommendation, flagged where the measurement disagrees with it."""
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    if len(ok) == 0:
        return "nothing was measured (every point failed): see the reasons in the table"
    lines = []
    hidden_at = None
    busy = []
    for _, r in ok.sort_values("workers").iterrows():
        w, share = int(r["workers"]), float(r["data_wait_s"]) / float(r["step_s"]) if r["step_s"] else 0.0
        q = as_quietness(r.get("quietness"))
        head = f"{plural(w, 'worker')}: measured wait {_ms(r['data_wait_s'])} = {share:.0%} of the step"
        if q.disturbed:
            busy.append(f"{plural(w, 'worker')}: {q.cause}")
            lines.append(f"{head} ({busy_text(q.cause)}; model {_ms(r['predicted_wait_s'])})")
            continue
        hid = share < HIDDEN
        if hid and hidden_at is None:
            hidden_at = w
        lines.append(f"{head} ({'hidden' if hid else 'not hidden'}; model {_ms(r['predicted_wait_s'])})")
    if busy and len(busy) == len(ok):
        verdict = f"Measured: {busy_text('; '.join(busy))}."
    elif hidden_at is not None:
        verdict = f"Measured: loading hides from {plural(hidden_at, 'worker')} on."
    else:
        tried = "measured on a quiet machine" if busy else "tried"
        verdict = f"Measured: loading is not hidden at any worker count {tried} (wait ≥ {HIDDEN:.0%} of the step)."
    out = "\n".join(lines) + "\n" + verdict
    if model_reason:
        out += f"\nThe model recommends: {model_reason}"
        if hidden_at is None and len(busy) < len(ok):
            out += ("\nThe measurement disagrees: on this shared machine the workers and the step compete for the "
                    "same cores, and each handover costs a pickle through a queue, which the model does not count.")
    return out
