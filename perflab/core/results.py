"""Sweeps that survive: every point is written as it is measured, and a re-run resumes.

    >>> def measure(p):                       # one point -> a dict of numbers
    ...     r = bench(lambda: mm(p["n"]))
    ...     return {"median_s": r.median_s}
    >>> res = run_sweep("matmul_n", [{"n": n} for n in (256, 512, 1024)], measure)
    >>> res.frame                             # a pandas DataFrame, one row per point

Points live in `<results>/<host>/<device>/<name>.jsonl`, one JSON object per line, appended and
flushed as soon as each point is measured. `<results>` is $PERFLAB_RESULTS, else `results/` in the
course checkout, else ~/.cache/perflab/results. Running the same sweep again skips every point
already in the file. A point that fails is recorded with its status and reason and the sweep goes
on: "oom" (out of memory), "invalid" (a shape or dtype that cannot work) or "error" (anything
else). Ctrl-C (or the notebook's stop button) ends the sweep, keeps what was measured, and says
how to resume.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflab.core.errors import InputError, UnsupportedError, one_line


def course_checkout() -> Path | None:
    """The course's checkout that holds this perflab (it has notebooks/ and pyproject.toml), or
    None for an installed copy."""
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "notebooks").is_dir() and (checkout / "pyproject.toml").is_file():
        return checkout
    return None


def results_root() -> Path:
    """Where results go: $PERFLAB_RESULTS, else <checkout>/results, else ~/.cache/perflab/results."""
    env = os.environ.get("PERFLAB_RESULTS")
    if env:
        return Path(env).expanduser()
    checkout = course_checkout()
    return checkout / "results" if checkout else Path.home() / ".cache" / "perflab" / "results"


def _safe(part: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in part).strip("-") or "unknown"


def sweep_path(name: str, device_slug: str | None = None, host: str | None = None, root: Path | None = None) -> Path:
    """The file a sweep named `name` writes for this host and device."""
    if device_slug is None:
        from perflab.core.device import describe

        device_slug = describe().slug
    return (root or results_root()) / _safe(host or socket.gethostname()) / _safe(device_slug) / f"{_safe(name)}.jsonl"


def set_aside(path: Path) -> Path | None:
    """Rename a results file out of the way (`name.YYYYmmdd-HHMMSS.jsonl` beside it, never deleted) so
    that the next run measures every point again (what `--fresh` does). Returns the new name, or None
    when there was nothing to set aside."""
    path = Path(path)
    if not path.exists():
        return None
    new = path.with_name(f"{path.stem}.{time.strftime('%Y%m%d-%H%M%S')}{path.suffix}")
    path.rename(new)
    return new


def point_key(params: Mapping[str, Any]) -> str:
    """A canonical string for a point's parameters (key order does not matter)."""
    return json.dumps(dict(params), sort_keys=True, default=str)


def classify_failure(exc: BaseException) -> str:
    """'oom', 'invalid' or 'error' for an exception raised while measuring a point."""
    try:
        import torch

        if isinstance(exc, torch.OutOfMemoryError):
            return "oom"
    except (ImportError, AttributeError):  # pragma: no cover
        pass
    text = str(exc).lower()
    if isinstance(exc, MemoryError) or "out of memory" in text or "can't allocate memory" in text:
        return "oom"
    if isinstance(exc, (InputError, UnsupportedError)):
        return "invalid"
    return "error"


@dataclass
class SweepResult:
    """What a sweep has: every recorded row (old and new), and what happened in this run."""

    path: Path
    rows: list[dict[str, Any]]
    measured: int = 0
    skipped: int = 0
    failed: int = 0
    interrupted: bool = False
    messages: list[str] = field(default_factory=list)

    @property
    def frame(self):
        """The rows as a pandas DataFrame: parameters and metrics as columns, plus `status`."""
        import pandas as pd

        flat = [{**r.get("params", {}), **{k: v for k, v in r.items() if k != "params"}} for r in self.rows]
        return pd.DataFrame(flat)

    def ok_frame(self):
        df = self.frame
        return df[df["status"] == "ok"] if len(df) else df

    def summary(self) -> str:
        s = f"{self.measured} measured, {self.skipped} already in {self.path}, {self.failed} failed"
        if self.interrupted:
            s += " — interrupted: run the same sweep again to resume"
        return s


def load_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a results file; a torn last line (from a crash mid-write) is ignored."""
    rows = []
    if path.exists():
        with path.open() as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return rows


def _append(path: Path, row: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(row, default=jsonable) + "\n")
        f.flush()
        os.fsync(f.fileno())


def jsonable(x):
    """`json.dumps(default=jsonable)`: arrays and tensors as lists, other numbers as floats, the rest as text."""
    if hasattr(x, "tolist"):
        return x.tolist()
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)


def _progress(total: int, desc: str, enabled: bool):
    if not enabled or total <= 1:
        return None
    try:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit="pt", leave=False)
    except ImportError:  # pragma: no cover
        return None


def run_sweep(
    name: str,
    points: Iterable[Mapping[str, Any]],
    measure: Callable[[dict[str, Any]], Mapping[str, Any]],
    *,
    path: Path | str | None = None,
    device_slug: str | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    on_point: Callable[[dict[str, Any]], None] | None = None,
) -> SweepResult:
    """Measure every point not yet in the sweep's file, appending each as soon as it is done.

    measure(params) returns a mapping of metrics; exceptions become failed rows. `retry_failed`
    measures failed points again (e.g. after freeing memory). Returns all rows for these points,
    in the order given; rows of other points in the same file are kept but not returned.
    """
    pts = [dict(p) for p in points]
    p = Path(path) if path is not None else sweep_path(name, device_slug)
    existing = {}
    for row in load_rows(p):
        existing[point_key(row.get("params", {}))] = row  # a later row for the same point wins
    res = SweepResult(path=p, rows=[])
    todo = []
    for params in pts:
        row = existing.get(point_key(params))
        if row is not None and (row.get("status") == "ok" or not retry_failed):
            res.skipped += 1
        else:
            todo.append(params)
    bar = _progress(len(todo), name, progress)
    done: dict[str, dict[str, Any]] = {}
    try:
        for params in todo:
            t0 = time.time()
            try:
                metrics = dict(measure(dict(params)))
                row = {"params": params, "status": "ok", **metrics}
                res.measured += 1
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # record it and go on: a sweep never dies for one point
                status = classify_failure(exc)
                row = {"params": params, "status": status, "reason": one_line(exc)}
                res.failed += 1
                res.messages.append(f"{point_key(params)}: {status}: {one_line(exc)}")
                if status == "oom":
                    _free_cached_memory()
            row["time"] = time.strftime("%Y-%m-%dT%H:%M:%S")
            row["wall_s"] = round(time.time() - t0, 4)
            _append(p, row)
            done[point_key(params)] = row
            if on_point:
                on_point(row)
            if bar is not None:
                bar.update(1)
    except KeyboardInterrupt:
        res.interrupted = True
        print(f"[perflab] sweep {name!r} interrupted: {len(done)} new points kept in {p}; "
              "run it again to resume", file=sys.stderr)
    finally:
        if bar is not None:
            bar.close()
    for params in pts:
        k = point_key(params)
        row = done.get(k) or existing.get(k)
        if row is not None:
            res.rows.append(row)
    return res


def _free_cached_memory() -> None:
    try:
        import gc

        import torch

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # pragma: no cover
        pass
