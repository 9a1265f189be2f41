"""Maximum achievable matmul FLOP/s (MAMF): the best TFLOP/s a matmul reaches on this device.

A datasheet peak is never reached; the best a real matmul reaches is the honest ceiling to
measure a training run against (S. Bekman's mamf-finder.py, after Anthony et al., "The Case for
Co-Designing Model Architectures with Hardware", arXiv:2401.14489). It depends on the shape, so
it is found by searching shapes:

* `strategy="grid"` measures every (m, n, k) of the ranges (brute force);
* `strategy="refine"` (default) measures a coarse sub-grid (every 2^j-th value of each range and
  the last), then repeatedly measures the neighbours of the best few points, halving the step
  until it is the grid's own step and no neighbour of the best few is left unmeasured. It reaches
  the brute-force optimum of a grid in a fraction of the points (tests/unit/gemm/test_mamf.py checks both).

Every point is timed like `triton.testing.do_bench` (perflab.core.timing.bench) with the L2 cache
flushed before each call on a GPU, checked against float64 first, and appended to
`<results>/<host>/<device>/mamf_<dtype>.jsonl` as soon as it is measured, so an interrupted search
resumes where it stopped (each stage re-reads what is already there). For each point:
mean = FLOPs / mean time, median = FLOPs / median time, max = FLOPs / fastest time; the search
ranks by `stat` (default mean, as the published MAMF table does).

When a search finishes, its best is offered to the device's one ceiling store (`perflab.core.ceiling`,
`<results>/<host>/<device>/ceilings.json`, per dtype), which keeps it only under its one rule: a best
that repeated, measured on a quiet machine, not above the peak, and no less quietly than the stored
one (`save_ceiling_record`). `measured_ceiling(device, dtype)` returns it (TFLOP/s) for other lessons
to use as "the measured ceiling", or None when this device has not been searched. It is never an MFU's
basis (`perflab.core.ceiling` says why).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON

if TYPE_CHECKING:
    from perflab.core.ceiling import CeilingRecord, Slot
    from perflab.core.dtypes import DType
    from perflab.core.hardware import Peaks

STATS = ("mean", "median", "max")
STRATEGIES = ("refine", "grid")


def parse_range(start: int, stop: int, step: int, name: str = "m") -> list[int]:
    """START, START+STEP, ... up to and including STOP; sizes below 1 are skipped (so `0 4096 256`,
    as mamf-finder.py users write it, means 256, 512, ..., 4096)."""
    from perflab.gemm.shapes import fine_values

    return fine_values(start, stop, step, name=f"--{name}-range")


# ---------------------------------------------------------------- measuring one point

def _operands(m: int, n: int, k: int, dt, dev, seed: int = 0):
    import torch

    from perflab.core.measure import make_matmul

    if dt.name == "fp8":
        return make_matmul(m, n, k, dt, dev, seed=seed)
    g = torch.Generator(device=dev).manual_seed(seed)
    a = torch.randn(m, k, device=dev, dtype=dt.torch_dtype, generator=g)
    b = torch.randn(k, n, device=dev, dtype=dt.torch_dtype, generator=g)
    return (lambda: a @ b), a, b


def _check(fn, a, b, dt, rows: int = 32, cols: int = 32) -> float:
    """Relative error of a corner of fn()'s product against float64 (computed on the device)."""
    import torch

    from perflab.core.measure import check_matmul
    from perflab.core.timing import check_close, default_tolerance

    if dt.name == "fp8":
        return check_matmul(fn, a, b, dt)
    out = fn()
    r, c = min(rows, a.shape[0]), min(cols, b.shape[1])
    ref = a[:r].to(torch.float64) @ b[:, :c].to(torch.float64)
    tol = 5e-3 if dt.name == "tf32" else default_tolerance(dt.torch_dtype)
    return check_close(out[:r, :c], ref, tol=tol, what=f"{dt.name} matmul").rel_error


def measure_point(m: int, n: int, k: int, dtype: str = "bf16", device=None, *, flush_l2: bool | None = None,
                  warmup_ms: float = 20, rep_ms: float = 60, check: bool = True) -> JSON:
    """Time one m×k by k×n matmul and return its mean/median/max TFLOP/s (see the module docstring), as
    the row the search's results file keeps."""
    import statistics

    import torch

    from perflab.core.device import pick_device
    from perflab.core.measure import tf32_mode, validate_matmul
    from perflab.core.quietness import of_bench, watch
    from perflab.core.timing import bench

    dev = torch.device(device) if device is not None else pick_device()
    m, n, k, dt = validate_matmul(m, n, k, dtype, dev)
    ctx = tf32_mode(dt.name == "tf32") if dev.type == "cuda" else contextlib.nullcontext()
    with ctx:
        fn, a, b = _operands(m, n, k, dt, dev)
        rel = _check(fn, a, b, dt) if check else float("nan")
        with watch(dev) as w:
            r = bench(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, device=dev, flush_l2=flush_l2,
                      label=f"mamf {m}×{n}×{k} {dt.name}")
    flops = 2 * m * n * k
    mean_s = statistics.fmean(r.times_s)
    return {"mean_tflops": flops / mean_s / 1e12, "median_tflops": flops / r.median_s / 1e12,
            "max_tflops": flops / r.min_s / 1e12, "median_s": r.median_s, "n_reps": r.n, "rel_error": rel,
            "flushed_l2": r.flushed_l2, "spread": r.iqr_s / r.median_s, "quietness": of_bench(r, w).to_json()}


# ---------------------------------------------------------------- the search

@dataclass
class MamfResult:
    """What a search found. TFLOP/s everywhere; `best` is None when no point could be measured."""

    best: dict[str, Any] | None
    dtype: str
    stat: str
    strategy: str
    grid_points: int
    evaluated: int  # points of the grid this search looked at (measured now or read back)
    measured: int  # of those, measured in this run
    elapsed_s: float
    interrupted: bool
    path: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    device_name: str = ""
    ceiling_path: Path | None = None
    saved: dict[str, Any] | None = None  # points read back from the results file: how many, when, how quiet

    @property
    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows)

    @property
    def fraction(self) -> float:
        """Evaluated points / grid points."""
        return self.evaluated / self.grid_points if self.grid_points else float("nan")

    def as_dict(self) -> JSON:
        """The search for `perflab mamf --json` and a recorded reference."""
        return {"dtype": self.dtype, "stat": self.stat, "strategy": self.strategy, "device": self.device_name,
                "best": self.best, "grid_points": self.grid_points, "evaluated": self.evaluated,
                "measured": self.measured, "elapsed_s": self.elapsed_s, "interrupted": self.interrupted,
                "results_file": str(self.path), "ceiling_file": str(self.ceiling_path) if self.ceiling_path else None,
                "saved": self.saved, "stored": self.stored_note()}

    def saved_note(self) -> str:
        """'' when every shape was measured now; else when (and how quietly) the saved ones were."""
        from perflab.core.sweepnoise import saved_note

        return saved_note(self.saved, self.path)

    def text(self, peak_tflops: float | None = None, peak_source: str = "", published: dict[str, Any] | None = None,
             device=None) -> str:
        """The search in words: its best (with the machine's quietness while it was measured) and how much of the
        grid it looked at; the best against the spec or estimated peak and against the published MAMF of this
        device (`published`, a row of the published table), and whether it became the stored ceiling."""
        from perflab.core.sweepnoise import quietness_of

        b = self.best
        if b is None:
            return f"MAMF {self.dtype} on {self.device_name}: no shape could be measured"
        q = quietness_of(b.get("quietness"))
        lines = [f"MAMF {self.dtype} on {self.device_name}: {b['tflops']:.4g} TFLOP/s ({self.stat}) at "
                 f"{b['m']}×{b['n']}×{b['k']} ({q.line()}); {self.evaluated} of {self.grid_points} shapes looked at "
                 f"({self.fraction:.0%})"]
        if peak_tflops:
            lines.append(f"  peak: {peak_tflops:.4g} TFLOP/s ({peak_source}) → {b['tflops'] / peak_tflops:.0%} of it"
                         + (" (above the peak: a measurement to question, not a ceiling to store)"
                            if b["tflops"] > peak_tflops else ""))
        else:
            lines.append("  peak unknown")
        lines.append(f"  published MAMF for {published['accelerator']}: {published['tflops']:g} TFLOP/s "
                     f"({published['source']})" if published else "  no published MAMF for this device in perflab's table")
        lines += [f"  {x}" for x in (self.stored_note(), self.saved_note(), ceiling_note(device, self.dtype)) if x]
        return "\n".join(lines)

    def stored_note(self) -> str | None:
        """Whether this search's best became the device's stored ceiling, and if not, why."""
        if self.ceiling_path is None or self.best is None:
            return None
        from perflab.core import ceiling

        last = ceiling.read(self.ceiling_path).slot(ceiling.slot_key("search", self.dtype)).last
        why = last.questioned if last else None
        return f"not stored as this device's ceiling: {why}" if why else "stored as this device's measured ceiling"


def _coarse_axis(length: int, points: int) -> tuple[list[int], int]:
    """Indices of a coarse pass over an axis of `length` values, and its stride (a power of two)."""
    if length <= points:
        return list(range(length)), 1
    stride = 2 ** math.ceil(math.log2((length - 1) / (points - 1)))
    idx = list(range(0, length, stride))
    if idx[-1] != length - 1:
        idx.append(length - 1)
    return idx, stride


def search(m_values: Sequence[int], n_values: Sequence[int], k_values: Sequence[int], *, dtype: str | DType = "bf16",
           device=None, strategy: str = "refine", stat: str = "mean", flush_l2: bool | None = None,
           warmup_ms: float = 20, rep_ms: float = 60, top: int = 3, coarse_points: int = 3, plane_limit: int = 1024,
           measure: Callable[[dict[str, Any]], dict[str, Any]] | None = None, path: Path | str | None = None,
           name: str | None = None, progress: bool = True, save_ceiling: bool = True, retries: int = 2,
           peaks: Peaks | None = None) -> MamfResult:
    """Find the (m, n, k) of the grid m_values × n_values × k_values with the highest TFLOP/s.

    measure(params) -> {'mean_tflops', 'median_tflops', 'max_tflops', ...} replaces the real
    measurement (tests use a model landscape). path/name choose the results file (default
    <results>/<host>/<device>/mamf_<dtype>.jsonl).

    Before a best is named it is measured again `retries` times (saved beside the search, in
    `<name>_confirm.jsonl`): the first of the best few whose measurements agree within the stated noise
    (`perflab.core.sweepnoise`) is the best, its TFLOP/s the median of them; a shape whose figure did
    not repeat (a spike) cannot be the best. `best` carries its quietness. `peaks` are the device's peaks
    its best is checked against before it is stored (default `perflab.core.hardware.peaks_for`).
    """
    import torch

    from perflab.core.device import describe, pick_device
    from perflab.core.dtypes import check_supported, parse_dtype
    from perflab.core.results import point_key, run_sweep, sweep_path
    from perflab.core.sweepnoise import saved_summary
    from perflab.core.validate import positive_int

    if strategy not in STRATEGIES:
        raise InputError(f"unknown search {strategy!r}: use {' or '.join(STRATEGIES)}")
    if stat not in STATS:
        raise InputError(f"unknown statistic {stat!r}: use mean, median or max")
    axes = [sorted({positive_int(nm, v) for v in vals}) for nm, vals in (("m", m_values), ("n", n_values), ("k", k_values))]
    if any(not a for a in axes):
        raise InputError("every range needs at least one size")
    top = positive_int("top", top)
    coarse_points = max(2, positive_int("coarse points", coarse_points))
    dt = parse_dtype(dtype)
    dev = torch.device(device) if device is not None else pick_device()
    info = describe(dev)
    measure_fn: Callable[[dict[str, Any]], dict[str, Any]]
    if measure is None:
        check_supported(dt, dev)
        from perflab.core.measure import validate_matmul

        validate_matmul(axes[0][-1], axes[1][-1], axes[2][-1], dt, dev)  # the largest point must fit
        flush = (dev.type == "cuda") if flush_l2 is None else bool(flush_l2)

        def _measure_point(p: JSON) -> JSON:
            return measure_point(p["m"], p["n"], p["k"], p["dtype"], dev, flush_l2=flush, warmup_ms=warmup_ms,
                                 rep_ms=rep_ms)
        measure_fn = _measure_point
    else:
        measure_fn = measure
        flush = bool(flush_l2)
    file = Path(path) if path is not None else sweep_path(name or f"mamf_{dt.name}", info.slug)
    key = f"{stat}_tflops"
    scores: dict[tuple[int, int, int], float] = {}
    rows: dict[tuple[int, int, int], dict[str, Any]] = {}
    state = {"measured": 0, "interrupted": False}
    now: set[str] = set()
    served: list[dict[str, Any]] = []
    t0 = time.perf_counter()

    def evaluate(indices, stage: str) -> None:
        todo = [i for i in dict.fromkeys(indices) if i not in scores]
        if not todo or state["interrupted"]:
            return
        pts = [{"m": axes[0][i], "n": axes[1][j], "k": axes[2][kk], "dtype": dt.name, "flush_l2": flush} for i, j, kk in todo]
        res = run_sweep(file.stem, pts, measure_fn, path=file, progress=progress and len(pts) > 3,
                        on_point=lambda row: now.add(point_key(row["params"])))
        served.extend(res.rows)
        state["measured"] += res.measured
        state["interrupted"] = state["interrupted"] or res.interrupted
        by_key = {(r["params"]["m"], r["params"]["n"], r["params"]["k"]): r for r in res.rows}
        for idx in todo:
            shape = (axes[0][idx[0]], axes[1][idx[1]], axes[2][idx[2]])
            r = by_key.get(shape)
            if r is None:  # not reached (interrupted)
                continue
            ok = r.get("status") == "ok" and r.get(key) is not None
            scores[idx] = float(r[key]) if ok else -math.inf
            rows[idx] = {"m": shape[0], "n": shape[1], "k": shape[2], "stage": stage, "status": r.get("status"),
                         **{s: r.get(f"{s}_tflops") for s in STATS}, "reason": r.get("reason"),
                         "spread": r.get("spread"), "quietness": r.get("quietness")}

    def ranked():
        return sorted(scores, key=lambda i: (-scores[i], i))

    def climb(strides, stage: str) -> None:
        """Measure the unmeasured neighbours (±stride on every axis) of the best few, until none is left."""
        while not state["interrupted"]:
            cand = []
            for c in ranked()[:top]:
                for d in itertools.product(*([-s, 0, s] for s in strides)):
                    idx = tuple(c[a] + d[a] for a in range(3))
                    if all(0 <= idx[a] < len(axes[a]) for a in range(3)) and idx not in scores:
                        cand.append(idx)
            if not cand:
                return
            evaluate(cand, stage)

    if strategy == "grid":
        evaluate(itertools.product(*(range(len(a)) for a in axes)), "grid")
    else:
        coarse = [_coarse_axis(len(a), coarse_points) for a in axes]
        evaluate(itertools.product(*(c[0] for c in coarse)), "coarse")
        strides = [c[1] for c in coarse]
        while not state["interrupted"]:
            climb(strides, f"refine step {'×'.join(map(str, strides))}")
            if all(s == 1 for s in strides):
                break
            strides = [max(1, s // 2) for s in strides]
        # wave quantization makes throughput jagged along each axis: scan whole lines through the
        # best few points (coordinate search), then polish their ±1 neighbourhoods, until stable
        for _ in range(100):
            if state["interrupted"]:
                break
            before = ranked()[:top]
            for c in before:
                line = []
                for a in range(3):
                    for v in range(len(axes[a])):
                        idx = list(c)
                        idx[a] = v
                        line.append(tuple(idx))
                evaluate(line, "line scan")
            climb([1, 1, 1], "polish")
            if ranked()[:top] == before:
                break
        # tiles and waves are set by m and n together: when the m×n plane is small enough, scan the
        # whole plane at the best k, then polish again
        if not state["interrupted"] and scores and len(axes[0]) * len(axes[1]) <= plane_limit:
            kb = ranked()[0][2]
            evaluate(((i, j, kb) for i in range(len(axes[0])) for j in range(len(axes[1]))), "m×n plane")
            climb([1, 1, 1], "polish")
    best = None
    finite = [i for i in ranked() if math.isfinite(scores[i])]
    if finite:
        best = _confirmed_best(finite[:top], rows, scores, key, stat, measure_fn, file, retries, dtype=dt.name,
                               interrupted=state["interrupted"])
    elapsed = time.perf_counter() - t0
    grid_points = math.prod(len(a) for a in axes)
    result = MamfResult(best, dt.name, stat, strategy, grid_points, len(scores), state["measured"], elapsed,
                        state["interrupted"], file, list(rows.values()), info.name,  # in the order looked at
                        saved=saved_summary(list({point_key(r["params"]): r for r in served}.values()), now))
    if save_ceiling and best is not None and not state["interrupted"] and path is None:
        result.ceiling_path = save_ceiling_record(result, info, axes, peaks=peaks)
    return result


def _confirmed_best(candidates, rows, scores, key: str, stat: str, measure_fn, file: Path, retries: int, *,
                    dtype: str, interrupted: bool) -> dict[str, Any]:
    """The best of `candidates` (indices, best first) whose figure repeats: each is measured `retries`
    more times; the first whose measurements agree within K·σ (σ: the points' own timing spread, at
    least MIN_NOISE) wins with the median of them. None repeats: the first, marked unconfirmed."""
    from perflab.core.results import run_sweep
    from perflab.core.sweepnoise import K, Point, measured, noise, quietness_of

    sigma = noise([measured(1.0, r.get("spread"), None, r.get("n_reps")) for r in rows.values()])

    def record(idx, pt: Point | None, confirmed: bool) -> dict[str, Any]:
        b = rows[idx]
        value = pt.value if pt is not None else scores[idx]
        out = {"m": b["m"], "n": b["n"], "k": b["k"], "tflops": value, "stat": stat, "mean": b["mean"],
               "median": b["median"], "max": b["max"], "confirmed": confirmed, "noise": sigma,
               "measurements": len(pt.measurements) if pt is not None else 1,
               "quietness": (pt.quietness if pt is not None else quietness_of(b.get("quietness"))).to_json(),
               "disturbed": bool(pt.disturbed) if pt is not None else None}
        if stat != "max":
            out[stat] = value
        return out

    if retries <= 0 or interrupted:
        return record(candidates[0], None, False)
    cfile = file.with_name(f"{file.stem}_confirm{file.suffix}")
    for idx in candidates:
        b = rows[idx]
        pts = [{"m": b["m"], "n": b["n"], "k": b["k"], "dtype": dtype, "again": a}
               for a in range(1, retries + 1)]
        res = run_sweep(cfile.stem, pts, measure_fn, path=cfile, progress=False)
        ms = [measured(scores[idx], b.get("spread"), b.get("quietness"), b.get("n_reps"))]
        ms += [measured(r[key], r.get("spread"), r.get("quietness"), r.get("n_reps")) for r in res.rows
               if r.get("status") == "ok" and r.get(key) is not None]
        pt = Point(idx, ms)
        vals = [m.value for m in pt.used]
        if len(vals) > 1 and min(vals) > 0 and math.log(max(vals) / min(vals)) <= K * sigma:
            return record(idx, pt, True)
    return record(candidates[0], None, False)


# ---------------------------------------------------------------- the measured ceiling, per device


def ceiling_path(device_slug: str, host: str | None = None) -> Path:
    """The device's ceiling store, `<results>/<host>/<device>/ceilings.json` (`perflab.core.ceiling`)."""
    from perflab.core.ceiling import store_path

    return store_path(device_slug, host)


def save_ceiling_record(result: MamfResult, info, axes, *, peaks: Peaks | None = None) -> Path:
    """Offer this search's best to the device's ceiling store as its `dtype`'s search ceiling
    (`perflab.core.ceiling`, kind 'search'): stored only under the store's one rule (not above the
    peak, its figure repeated, a quiet machine, never in place of a quieter version); otherwise kept
    as the latest search with `questioned` saying why. The record holds the shape, dtype, statistic,
    date, quietness and what else the search found (its mean, median and max, noise, ranges).
    Returns the store's path."""
    import torch

    from perflab.core import ceiling
    from perflab.core.hardware import peaks_for
    from perflab.core.sweepnoise import quietness_of

    if result.best is None:
        raise ValueError("save_ceiling_record needs a search that measured at least one point")
    b = result.best
    details = {k: b[k] for k in ("mean", "median", "max", "noise", "measurements", "disturbed") if k in b}
    details |= {"strategy": result.strategy, "evaluated": result.evaluated, "grid_points": result.grid_points,
                "ranges": {nm: [a[0], a[-1], len(a)] for nm, a in zip("mnk", axes, strict=True)},
                "host": socket.gethostname()}
    rec = ceiling.CeilingRecord(
        float(b["tflops"]), result.dtype, (int(b["m"]), int(b["n"]), int(b["k"])), str(b.get("stat", result.stat)),
        f"best of a MAMF {result.strategy} search ({result.evaluated} of {result.grid_points} shapes)",
        time.strftime("%Y-%m-%dT%H:%M:%S"), quietness_of(b.get("quietness")), torch.__version__, info.name,
        kind="search", confirmed=b.get("confirmed"), details=details)
    path = ceiling_path(info.slug)
    ceiling.offer(rec, peaks if peaks is not None else peaks_for(info), path)
    return path


def _search_slot(device, dtype: str | DType) -> Slot:
    """The device's search slot of its ceiling store, for `dtype`."""
    from perflab.core import ceiling
    from perflab.core.device import DeviceInfo, describe
    from perflab.core.dtypes import parse_dtype

    info = device if isinstance(device, DeviceInfo) else describe(device)
    return ceiling.read(ceiling_path(info.slug)).slot(ceiling.slot_key("search", parse_dtype(dtype).name))


def ceiling_record(device=None, dtype: str | DType = "bf16") -> CeilingRecord | None:
    """The best MAMF search result stored for `device` (default: perflab's pick; a torch device, a name
    `perflab.core.device.pick_device` accepts, or a DeviceInfo) and dtype, or None."""
    return _search_slot(device, dtype).current


def ceiling_note(device=None, dtype: str | DType = "bf16") -> str:
    """One sentence on the ceiling stored for `device` and `dtype`: its value, shape and date, and
    whether the latest search was questioned (above the peak, a busy machine) and so not stored."""
    slot = _search_slot(device, dtype)
    best, last = slot.current, slot.last
    out = (f"measured ceiling stored for this device: {best.tflops:.4g} TFLOP/s ({best.statistic}) at "
           f"{best.shape_text()} ({best.date}; {best.quietness.line()})" if best
           else "no measured ceiling stored for this device")
    if last and last.questioned:
        out += f"; the latest search ({last.tflops:.4g} TFLOP/s) was not stored: {last.questioned}"
    return out


def measured_ceiling(device=None, dtype: str | DType = "bf16") -> float | None:
    """The measured ceiling (TFLOP/s) for `device` and `dtype`: the best `perflab mamf` found, or None
    when no search has been run on this device yet. `device` may be a torch device, a name
    perflab.core.device.pick_device accepts, or a DeviceInfo."""
    rec = ceiling_record(device, dtype)
    return rec.tflops if rec else None


def default_ranges(on_gpu: bool, smoke: bool = False) -> dict[str, list[int]]:
    """Ranges for a search when none are given: large aligned shapes on a GPU, small ones on a CPU."""
    if smoke:
        vals = parse_range(64, 256, 64)
    elif on_gpu:
        vals = parse_range(1024, 16384, 1024)
    else:
        vals = parse_range(256, 2048, 256)
    return {"m": vals, "n": list(vals), "k": list(vals)}


def published_table(record: dict[str, Any]):
    """The published MAMF table (`perflab/gemm/data/published_shapes.json`, 'mamf'): accelerator, dtype, the best
    TFLOP/s found against the spec sheet's, its shape and the torch version."""
    import pandas as pd

    from perflab.core.readout import num

    return pd.DataFrame([{"accelerator": r["accelerator"], "dtype": r["dtype"], "MAMF TFLOP/s": num(r["tflops"]),
                          "spec TFLOP/s": num(r["theory_tflops"]), "share of spec": f"{r['tflops'] / r['theory_tflops']:.0%}",
                          "best shape": r["best_shape"], "torch": r["torch"]} for r in record["rows"]])


def reference_table(refs: Sequence[Any]):
    """Searches recorded on GPUs (`perflab reference record --what mamf`, read as references with `.provenance`,
    `.summary` and `.label`): the device, the best TFLOP/s and shape, the peak and the published MAMF."""
    import pandas as pd

    from perflab.core.readout import num

    def n(x):
        return num(x) if x else "–"

    rows = []
    for r in refs:
        b = r.summary["best"]
        rows.append({"device": r.provenance["device"], "MAMF TFLOP/s": n(b["tflops"]),
                     "best shape": f"{b['m']}×{b['n']}×{b['k']}", "peak TFLOP/s": n(r.summary.get("peak_tflops")),
                     "published TFLOP/s": n((r.summary.get("published") or {}).get("tflops")), "recorded": r.label})
    return pd.DataFrame(rows)
