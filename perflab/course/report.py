"""One report of what this machine can do, measured the way the course measures it.

    >>> doc = build_report(quick=True)          # every part; progress on stderr
    >>> write_report(doc, "out/")               # out/report.json and a standalone out/report.html
    >>> compare(doc_a, doc_b)                   # two machines side by side: b / a for every figure

A report is made of parts (report_parts.py), each measured by the function of the lesson it comes
from: device, matmul, mamf, memory, waves, collectives, numa, dataloader, tune.

Each part is a point of a resumable sweep (perflab.core.results): its result is appended to
`<results>/<host>/<device>/report[_quick].jsonl` as soon as it is measured, so running the report
again measures only what is missing or failed (`fresh=True` sets the old file aside). A part that
fails is recorded as failed, with its one-line reason, and the other parts go on.

The report is a `Report`: one `PartEntry` per part (its status, when it was measured, and what the
part returned: `figures`, `data`, `notes`, `summary`). Every part's `figures` are the numbers two
machines are compared by (`compare`: one `Comparison` per figure), each with a key, a label, a unit
and which direction is better. JSON is made at the edge: `Report.to_json()` is report.json and
`perflab report --json`; `load_report` reads one back.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import to_json
from perflab.course.report_parts import (
    QUICK_TUNE_RUNGS,
    Ctx,
    part_collectives,
    part_dataloader,
    part_device,
    part_mamf,
    part_matmul,
    part_memory,
    part_numa,
    part_tune,
    part_waves,
)
from perflab.course.report_types import (
    FORMAT,
    Comparison,
    Figure,
    PartEntry,
    PartResult,
    Report,
    figure,
)

# the names found here as they always were (the parts live in report_parts.py, the types in report_types.py)
__all__ = ["FORMAT", "PARTS", "QUICK_TUNE_RUNGS", "SAME", "Comparison", "Ctx", "Figure", "PartEntry", "PartResult",
           "Report", "build_report", "clean", "compare", "compare_text", "figure", "figures_of", "load_report",
           "part_collectives", "part_dataloader", "part_device", "part_mamf", "part_matmul", "part_memory",
           "part_numa", "part_tune", "part_waves", "select_parts", "write_report"]

SAME = 0.05  # two figures within 5 % of each other: neither machine is called better (timing noise)


PARTS: dict[str, tuple[str, Callable[[Ctx], PartResult]]] = {
    "device": ("Device and spec peaks", part_device),
    "matmul": ("Matmul TFLOP/s per dtype", part_matmul),
    "mamf": ("Maximum achievable matmul FLOP/s (MAMF)", part_mamf),
    "memory": ("Memory copy and host→device bandwidth", part_memory),
    "waves": ("A small wave sweep", part_waves),
    "collectives": ("Collectives: all-reduce busbw", part_collectives),
    "numa": ("NUMA topology", part_numa),
    "dataloader": ("DataLoader: data wait vs num_workers", part_dataloader),
    "tune": ("The capstone ladder: one training step made fast, rung by rung", part_tune),
}


def select_parts(only: Iterable[str] | None = None, skip: Iterable[str] | None = None) -> list[str]:
    """The parts to run, in report order; names may be comma-separated. Unknown names: InputError."""
    def names(xs):
        out = [n.strip().lower() for x in (xs or []) for n in str(x).split(",") if n.strip()]
        bad = [n for n in out if n not in PARTS]
        if bad:
            raise InputError(f"unknown part {bad[0]!r}: choose from {', '.join(PARTS)}")
        return out

    o, s = names(only), names(skip)
    chosen = [p for p in PARTS if (not o or p in o) and p not in s]
    if not chosen:
        raise InputError("--only and --skip leave no part to run")
    return chosen


# ---------------------------------------------------------------- measuring

def _say(msg: str, progress: bool) -> None:
    if progress:
        print(msg, file=sys.stderr, flush=True)


def build_report(*, quick: bool = False, only=None, skip=None, device=None, fresh: bool = False,
                 progress: bool = True, path: Path | str | None = None) -> Report:
    """Measure the selected parts (resuming a previous run of the same mode) and return the report."""
    from perflab import __version__
    from perflab.core.device import describe, pick_device
    from perflab.core.results import run_sweep, sweep_path

    chosen = select_parts(only, skip)
    dev = pick_device(device)
    info = describe(dev)
    ctx = Ctx(dev, info, quick)
    p = Path(path) if path is not None else sweep_path("report_quick" if quick else "report", info.slug)
    if fresh and p.exists():
        p.rename(p.with_name(f"{p.stem}.{time.strftime('%Y%m%d-%H%M%S')}.jsonl"))
    doc = Report(FORMAT, __version__, quick, time.strftime("%Y-%m-%dT%H:%M:%S%z"), info.as_dict()["host"],
                 {"kind": info.kind, "name": info.name}, str(p))
    t_all = time.perf_counter()
    for i, name in enumerate(chosen, 1):
        title, fn = PARTS[name]
        _say(f"[{i}/{len(chosen)}] {name}: {title} …", progress)
        t0 = time.perf_counter()

        def one(_params, fn=fn):
            return to_json(fn(ctx))  # the row of the results file: figures, data, notes, summary

        res = run_sweep(f"report_{name}", [{"part": name}], one, path=p, retry_failed=True, progress=False)
        if res.interrupted or not res.rows:
            doc.interrupted = True
            _say(f"      interrupted: what was measured is kept in {p}; run the same command again to resume", progress)
            break
        row = res.rows[0]
        entry = PartEntry(title, "ok" if row.get("status") == "ok" else "failed", row.get("wall_s"), row.get("time"),
                          res.skipped > 0)
        if entry.ok:
            entry.summary, entry.data, entry.notes = row.get("summary"), row.get("data"), row.get("notes")
            entry.figures = [Figure.from_json(f) for f in row.get("figures") or []]
            how = (f"served from results saved {str(row.get('time', 'undated')).replace('T', ' ')[:16]} (resumed; --fresh "
                   "measures again)" if res.skipped else f"done in {time.perf_counter() - t0:.1f} s")
            _say(f"      {how}: {row.get('summary', '')}", progress)
        else:
            entry.reason = f"{row.get('status')}: {row.get('reason')}"
            _say(f"      FAILED ({entry.reason}); going on", progress)
        doc.parts[name] = entry
    doc.elapsed_s = round(time.perf_counter() - t_all, 2)
    doc.failed = [n for n, e in doc.parts.items() if not e.ok]
    resumed = [n for n, e in doc.parts.items() if e.resumed]
    _say(f"report: {len(doc.parts) - len(doc.failed)} of {len(chosen)} parts measured"
         + (f", failed: {', '.join(doc.failed)}" if doc.failed else "") + f" ({doc.elapsed_s:.1f} s)"
         + (f"; {len(resumed)} taken from an earlier run ({p}): --fresh measures them again" if resumed else ""),
         progress)
    return doc


# ---------------------------------------------------------------- files

def write_report(doc: Report, out: Path | str) -> tuple[Path, Path]:
    """report.json and a standalone report.html (figures embedded) in the folder `out`."""
    import json

    from perflab.course.report_html import render

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    jp, hp = out / "report.json", out / "report.html"
    jp.write_text(json.dumps(clean(doc.to_json()), indent=1) + "\n")
    hp.write_text(render(doc), encoding="utf-8")
    return jp, hp


def clean(x):
    """JSON-safe: NaN and infinities become null."""
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    return x


def load_report(path: Path | str) -> Report:
    """A report.json, checked to be one (InputError otherwise)."""
    import json

    p = Path(path).expanduser()
    if not p.is_file():
        raise InputError(f"{path}: no such file (give two report.json files written by `perflab report`)")
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or "perflab_report" not in doc or not isinstance(doc.get("parts"), dict):
        raise InputError(f"{path}: not a report written by `perflab report`")
    return Report.from_json(doc)


# ---------------------------------------------------------------- two machines side by side

def _as_report(doc: Report | Mapping[str, Any]) -> Report:
    return doc if isinstance(doc, Report) else Report.from_json(doc)


def figures_of(doc: Report | Mapping[str, Any]) -> dict[str, Figure]:
    """key → figure for every figure of every measured part, in report order (of a Report, or of
    its JSON as `--json` printed it)."""
    return {f.key: f for part in _as_report(doc).parts.values() for f in part.figures}



def compare(a: Report | Mapping[str, Any], b: Report | Mapping[str, Any]) -> list[Comparison]:
    """One row per figure of either report (see `Comparison`), a's figures first."""
    def by_key(doc: Report) -> dict[str, tuple[str, Figure]]:
        return {f.key: (name, f) for name, part in doc.parts.items() for f in part.figures}

    fa, fb = by_key(_as_report(a)), by_key(_as_report(b))
    keys = list(fa) + [k for k in fb if k not in fa]
    rows = []
    for k in keys:
        x, y = fa.get(k), fb.get(k)
        part, ref = fa[k] if k in fa else fb[k]  # every key comes from one of the two reports
        va = x[1].value if x else None
        vb = y[1].value if y else None
        ratio = (vb / va) if (isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va != 0) else None
        b_better = None
        if ratio is not None and ref.better in ("higher", "lower") and abs(ratio - 1) > SAME:
            b_better = (ratio > 1) == (ref.better == "higher")
        rows.append(Comparison(k, part, ref.label, ref.unit, va, vb, ratio, ref.better, b_better))
    return rows


def compare_text(a: Report, b: Report, rows: list[Comparison]) -> str:
    from perflab.core.readout import num

    def who(d: Report) -> str:
        return f"{d.device_name} on {d.host if d.host is not None else '?'}" + (" (quick)" if d.quick else "")

    lines = [f"a: {who(a)}", f"b: {who(b)}", ""]
    w = max([len(r.label) for r in rows] + [6])
    lines.append(f"{'figure':<{w}}  {'a':>10}  {'b':>10}  {'b / a':>8}  unit")
    for r in rows:
        ratio = "–" if r.ratio is None else f"{r.ratio:.3g}×"
        mark = {True: "  b better", False: "  a better", None: ""}[r.b_better]
        lines.append(f"{r.label:<{w}}  {num(r.a):>10}  {num(r.b):>10}  {ratio:>8}  {r.unit}{mark}")
    return "\n".join(lines)
