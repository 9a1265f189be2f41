"""Checks for labs/09_diagnose.ipynb: name why a step's device idles, from its trace alone.

The learner writes `name_cause(trace)`, which gets a `perflab.profiling.trace.Trace` and returns
one of 'data_wait', 'host_sync', 'launch_bound', 'communication' or 'none', and picks a fix for
each cause. `check_name_cause` runs it on hand-built traces (CPU- and GPU-style, deterministic)
and on the lab's live traces of steps with hidden faults: a live trace counts only when
perflab's own `diagnose` agrees with the planted fault (a very noisy machine can blur one).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perflab.core.grading import _RESULTS, NOT_DONE, LabCheckError, attempt
from perflab.profiling.diagnose import NONE_THRESHOLD, diagnose
from perflab.profiling.faults import EXPECTED
from perflab.profiling.trace import Trace, load, synthetic_step

ANSWERS = ("data_wait", "host_sync", "launch_bound", "communication", "none")
FIX_CHOICES = {
    "a": "give the DataLoader workers (num_workers > 0) so batches are loaded ahead",
    "b": "drop the per-layer .item()/.cpu() checks; check every N steps, on the device",
    "c": "replace the Python loop of tiny ops by one vectorised/foreach op (or compile it)",
    "d": "overlap the gradient all-reduce with backward (DDP's buckets) instead of one tensor at a time after it",
    "e": "buy a faster GPU",
}
RIGHT_FIX = {"data_wait": "a", "host_sync": "b", "launch_bound": "c", "communication": "d"}


def hidden_traces(folder: str | Path, faults=("none", "loader", "sync", "launch"), seed: int = 9, steps: int = 2,
                  **kw) -> list[tuple[str, str]]:
    """Profile a step per fault, in a shuffled order, and save each trace as `trace_<letter>.json`.
    Returns [(letter, path)]; which fault is which stays in `answer_key(folder)`."""
    import json

    from perflab.profiling.faults import profile_step

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    order = list(faults)
    random.Random(seed).shuffle(order)
    out, key = [], {}
    for letter, fault in zip("ABCDEFGH", order):
        path = folder / f"trace_{letter}.json"
        profile_step(fault=fault, steps=steps, trace_out=path, **kw)
        out.append((letter, str(path)))
        key[letter] = fault
    (folder / ".key.json").write_text(json.dumps(key))
    return out


def _key(folder: str | Path) -> dict[str, str]:
    import json

    return json.loads((Path(folder) / ".key.json").read_text())


def _truth(fault: str) -> str:
    return EXPECTED[fault] or "none"


def _perflab_says(trace: Trace) -> str:
    sig = diagnose(trace).significant(NONE_THRESHOLD)
    return sig[0].cause if sig else "none"


def check_name_cause(student: Callable[[Trace], str], folder: str | Path | None = None) -> bool:
    """Grade `name_cause` on the hand-built traces, then on the live ones in `folder` (if given)."""
    name = "name_cause"
    cases: list[tuple[str, Trace, str]] = []
    for on_gpu in (False, True):
        for cause in (None, "data_wait", "host_sync", "launch_bound", "communication"):
            label = f"hand-built {'GPU' if on_gpu else 'CPU'} trace with {cause or 'no fault'}"
            cases.append((label, load(synthetic_step(cause, on_gpu=on_gpu)), cause or "none"))
    skipped = []
    if folder is not None:
        for letter, fault in sorted(_key(folder).items()):
            t = load(Path(folder) / f"trace_{letter}.json")
            want = _truth(fault)
            if _perflab_says(t) != want:
                skipped.append(letter)
                continue
            cases.append((f"trace {letter}", t, want))
    for label, trace, want in cases:
        got = attempt(name, student, trace, what=f"the {label}")
        if got is NOT_DONE:
            return False
        if got not in ANSWERS:
            raise LabCheckError(f"{name}: returned {got!r} for the {label}; answer one of {', '.join(ANSWERS)}")
        if got != want:
            raise LabCheckError(f"{name}: the {label} says {want!r}, you said {got!r}. Hint: find the device's idle "
                                f"gaps inside each ProfilerStep and ask what the main thread was doing during them "
                                f"(trace.waits() names data, sync and collective waits; runs of ops shorter than "
                                f"{1e6 * 20e-6:.0f} µs are launch overhead)")
    _RESULTS[name] = "passed"
    note = f" ({len(skipped)} live trace(s) too noisy to grade: {', '.join(skipped)})" if skipped else ""
    print(f"✓ {name}: correct on {len(cases)} traces{note}")
    return True


def check_fixes(fixes: dict[str, Any]) -> bool:
    """`fixes`: cause → a letter of FIX_CHOICES."""
    name = "fixes"
    if any(v is None or v == "?" for v in fixes.values()) or set(fixes) != set(RIGHT_FIX):
        if set(fixes) - set(RIGHT_FIX):
            raise LabCheckError(f"{name}: unknown cause(s) {sorted(set(fixes) - set(RIGHT_FIX))}; "
                                f"use {', '.join(RIGHT_FIX)}")
        _RESULTS[name] = "not done"
        print(f"… {name}: not done yet — pick a letter for every cause.")
        return False
    for cause, letter in fixes.items():
        if str(letter).lower() not in FIX_CHOICES:
            raise LabCheckError(f"{name}: {letter!r} for {cause} is not one of {', '.join(FIX_CHOICES)}")
        if str(letter).lower() != RIGHT_FIX[cause]:
            raise LabCheckError(f"{name}: ({letter}) does not remove {cause}'s idle time: "
                                f"{FIX_CHOICES[str(letter).lower()]!r} — think about what the device waits for")
    _RESULTS[name] = "passed"
    print(f"✓ {name}: every cause has its fix")
    return True


def reveal(folder: str | Path) -> Any:
    """After the checks: each live trace's planted fault beside perflab's diagnosis, as a table."""
    import pandas as pd

    from perflab.core.readout import percent

    rows = []
    for letter, fault in sorted(_key(folder).items()):
        d = diagnose(Path(folder) / f"trace_{letter}.json")
        top = d.top
        rows.append({"trace": letter, "planted fault": fault, "expected cause": _truth(fault),
                     "perflab's top cause": top.cause if top and top.share >= NONE_THRESHOLD else "none",
                     "its share": percent(top.share) if top else "—", "device busy": percent(d.device_busy)})
    return pd.DataFrame(rows)
