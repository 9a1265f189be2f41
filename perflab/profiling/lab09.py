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

from perflab.core.jsonable import JSON
from perflab.grading.checks import NOT_DONE, NOT_PASSED, LabCheckError, Verdict, attempt, record
from perflab.profiling.diagnose import NONE_THRESHOLD, diagnose
from perflab.profiling.faults import EXPECTED
from perflab.profiling.trace import Trace, load, synthetic_step

ANSWERS = ("data_wait", "host_sync", "launch_bound", "communication", "none")
FIXES = {
    "data_wait": "give the DataLoader workers (num_workers > 0) so batches are loaded ahead",
    "host_sync": "drop the per-layer .item()/.cpu() checks; check every N steps, on the device",
    "launch_bound": "replace the Python loop of tiny ops by one vectorised/foreach op (or compile it)",
    "communication": "overlap the gradient all-reduce with backward (DDP's buckets) instead of one tensor at a time after it",
    "distractor": "buy a faster GPU",
}
CAUSE_ORDER = ("data_wait", "host_sync", "launch_bound", "communication")


def learner_seed(learner: str | None = None) -> int:
    """A number that is the same for one learner every time (their login name, or PERFLAB_LEARNER)."""
    import getpass
    import hashlib
    import os

    who = learner or os.environ.get("PERFLAB_LEARNER") or getpass.getuser()
    return int(hashlib.sha256(who.encode()).hexdigest()[:8], 16)


def _letters(learner: str | None = None) -> dict[str, str]:
    """fix key → letter, shuffled per learner so that no cause's fix sits at its position in
    CAUSE_ORDER: answering a, b, c, d in the order the causes are asked never passes."""
    rng = random.Random(learner_seed(learner))
    keys = list(FIXES)
    while True:
        rng.shuffle(keys)
        if all(keys[i] != cause for i, cause in enumerate(CAUSE_ORDER)):
            return {k: "abcde"[i] for i, k in enumerate(keys)}


def fix_choices(learner: str | None = None) -> dict[str, str]:
    """letter → fix, in this learner's order."""
    return {letter: FIXES[k] for k, letter in sorted(_letters(learner).items(), key=lambda kv: kv[1])}


def right_fix(learner: str | None = None) -> dict[str, str]:
    """cause → the right letter for this learner (for the tests)."""
    lt = _letters(learner)
    return {c: lt[c] for c in CAUSE_ORDER}


FIX_CHOICES = fix_choices("")  # a fixed order (the empty learner), for docs and tests


def allowance_trace() -> JSON:
    """A hand-built GPU trace (the JSON a profiler writes, as a dict) of host syncs whose waits end 30-33 µs before the device goes idle
    (the host's and the device's clocks and the profiler's bookkeeping differ by that much on real
    traces). Only a rule that allows 50 µs before a gap finds 'host_sync' in it; without the
    allowance its idle time is unexplained and the answer would be 'none'."""
    d = synthetic_step("host_sync", on_gpu=True)
    for e in d["traceEvents"]:
        if e.get("name") in ("cudaStreamSynchronize", "aten::item"):
            e["dur"] -= 40
    d["traceName"] = "synthetic host_sync, waits ending 30 µs before the gaps (GPU)"
    return d


HINTS = {
    "allowance": "count a wait that ended up to 50 µs before the gap (a GPU goes idle just as the host's sync "
                 "returns, and the two clocks differ by tens of µs): this is the missing allowance",
    "launch_bound": "runs of at least 8 ops shorter than 20 µs are launch overhead: count the time they span",
    "none": "a cause counts only when its idle time is at least 10% of the summed step time; below that, 'none'",
    "wait": "give each idle gap of the device, whole, to the kind of the host wait that overlaps it most",
}


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


def check_name_cause(student: Callable[[Trace], str], folder: str | Path | None = None) -> Verdict:
    """Grade `name_cause` on the hand-built traces (one of them needs the 50 µs allowance), then on
    the live ones in `folder` (if given). A wrong answer's hint names what the rule missed."""
    name = "name_cause"
    cases: list[tuple[str, Trace, str, str]] = []
    for on_gpu in (False, True):
        for cause in (None, "data_wait", "host_sync", "launch_bound", "communication"):
            label = f"hand-built {'GPU' if on_gpu else 'CPU'} trace with {cause or 'no fault'}"
            kind = "none" if cause is None else "launch_bound" if cause == "launch_bound" else "wait"
            cases.append((label, load(synthetic_step(cause, on_gpu=on_gpu)), cause or "none", kind))
    cases.append(("hand-built GPU trace whose syncs end 30 µs before the device idles", load(allowance_trace()),
                  "host_sync", "allowance"))
    skipped = []
    if folder is not None:
        for letter, fault in sorted(_key(folder).items()):
            t = load(Path(folder) / f"trace_{letter}.json")
            want = _truth(fault)
            if _perflab_says(t) != want:
                skipped.append(letter)
                continue
            cases.append((f"trace {letter}", t, want, "launch_bound" if want == "launch_bound" else
                          "none" if want == "none" else "wait"))
    from perflab.grading.guard import refuse_perflab
    from perflab.profiling import diagnose as _diag

    for i, (label, trace, want, kind) in enumerate(cases):
        got = attempt(name, student, trace, what=f"the {label}")
        if got is NOT_DONE:
            return NOT_PASSED
        if i == 0:
            refuse_perflab(name, student, [_diag.diagnose, diagnose, _perflab_says])
        if got not in ANSWERS:
            raise LabCheckError(f"{name}: returned {got!r} for the {label}; answer one of {', '.join(ANSWERS)}")
        if got != want:
            hint = HINTS[kind]
            if got == "none" and kind in ("wait", "launch_bound"):  # a real cause dismissed: the share is wrong?
                hint += "; " + HINTS["none"]
            raise LabCheckError(f"{name}: the {label} says {want!r}, you said {got!r}. Hint: {hint}")
    note = f" ({len(skipped)} live trace(s) too noisy to grade: {', '.join(skipped)})" if skipped else ""
    print(f"✓ {name}: correct on {len(cases)} traces{note}")
    return record(name, True)


def check_fixes(fixes: dict[str, Any], learner: str | None = None) -> Verdict:
    """`fixes`: cause → a letter of `fix_choices()` (this learner's order)."""
    name = "fixes"
    choices, right = fix_choices(learner), right_fix(learner)
    if any(v is None or v == "?" for v in fixes.values()) or set(fixes) != set(right):
        if set(fixes) - set(right):
            raise LabCheckError(f"{name}: unknown cause(s) {sorted(set(fixes) - set(right))}; "
                                f"use {', '.join(right)}")
        print(f"… {name}: not done yet — pick a letter for every cause.")
        return record(name, False)
    for cause, letter in fixes.items():
        if str(letter).lower() not in choices:
            raise LabCheckError(f"{name}: {letter!r} for {cause} is not one of {', '.join(choices)}")
        if str(letter).lower() != right[cause]:
            raise LabCheckError(f"{name}: ({letter}) does not remove {cause}'s idle time: "
                                f"{choices[str(letter).lower()]!r} — think about what the device waits for")
    print(f"✓ {name}: every cause has its fix")
    return record(name, True)


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


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
LEARNER_ANSWERS = ("name_cause", "fixes")
REFERENCES = {"name_cause": _perflab_says, "fixes": right_fix}
FORBIDDEN = (diagnose, _perflab_says, right_fix, _key, _truth)
HELPERS = ("learner_seed", "_letters", "fix_choices", "allowance_trace", "hidden_traces", "reveal")


def judge(answers, rng) -> None:
    """name_cause on the hand-built traces and on live ones profiled here, in an order and from a
    random seed drawn per learner; the fixes (letters in this learner's shuffle) read from the notebook."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="perflab-lab09-") as folder:
        hidden_traces(folder, faults=("sync", "none"), seed=rng.randint(0, 10**6))
        check_name_cause(answers["name_cause"], folder)
    fixes = answers.value("fixes")
    if not isinstance(fixes, dict) or not fixes:
        record("fixes", False)
        return
    check_fixes(fixes, learner=getattr(answers, "learner", None))
