"""Choosing the width of a SwiGLU MLP: candidates near 8/3·h, timed on this device.

A SwiGLU MLP (Shazeer, "GLU Variants Improve Transformer", arXiv:2002.05202) has three weight
matrices instead of two:  out = (silu(x·W1) ⊙ (x·W3)) · W2,  W1 and W3 of h×d_ff, W2 of d_ff×h,
so 3·h·d_ff parameters. Keeping the parameter count of a classic 4·h MLP (2·h·4h = 8h²) gives
d_ff = 8/3·h, which is never a round number (h = 4096 → 10922.67): the GEMMs then have a
dimension divisible only by 2 and run far below their best. The 8/3 is a suggestion, not a law:
Llama-2-7B uses 11008 (2.6875·h) and 70B 28672 (3.5·h). So search the widths near 8/3·h.
What can be said before measuring (the model, released widths, a published search) is
`perflab.gemm.swiglu_model`.

What is timed: the MLP's GEMMs for `tokens` rows (b·s of a realistic batch), forward and backward,
as autograd runs them — 3 forward (x·W1, x·W3, a·W2) and 6 backward (for each layer the input
gradient and the weight gradient), 9 matmuls of 2·tokens·h·d_ff FLOPs each, so 18·tokens·h·d_ff
FLOPs per step. The SwiGLU element-wise product and the activation are left out: they are
memory-bound, scale smoothly with d_ff, and would only blur the shape effects this measures.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, to_json
from perflab.core.readout import MACHINE, machine, num, seconds
from perflab.core.validate import positive_int

if TYPE_CHECKING:
    from perflab.core.quietness import Quietness


def eight_thirds(h: int) -> float:
    """8/3 · h, the width that keeps a SwiGLU MLP's parameters equal to a 4·h MLP's."""
    return 8 * positive_int("h", h) / 3


def baseline_width(h: int) -> int:
    """⌊8/3 · h⌋ (h = 4096 → 10922), the width a literal reading of the paper gives."""
    return int(8 * positive_int("h", h) // 3)


def candidate_widths(h: int, radius: int = 100, step: int = 4) -> list[int]:
    """The baseline ⌊8/3·h⌋ and every multiple of `step` within ±radius of it, sorted.

    h = 4096, radius 100, step 4: 10922 and 10824, 10828, ..., 11020 (51 widths).
    """
    base = baseline_width(h)
    radius = int(radius)
    if radius < 0:
        raise InputError(f"radius must be ≥ 0 (got {radius})")
    step = positive_int("step", step)
    lo, hi = max(1, base - radius), base + radius
    first = -(-lo // step) * step
    return sorted({base, *range(first, hi + 1, step)})


def mlp_params(h: int, d_ff: int) -> int:
    """Weights of a SwiGLU MLP without biases: 3 · h · d_ff."""
    return 3 * positive_int("h", h) * positive_int("d_ff", d_ff)


def params_delta(h: int, d_ff: int) -> int:
    """Parameters of width d_ff minus those at exactly 8/3·h (3·h·(8/3)h = 8h²): 3·h·d_ff − 8·h²."""
    return mlp_params(h, d_ff) - 8 * h * h


def mlp_flops(tokens: int, h: int, d_ff: int, backward: bool = True) -> int:
    """GEMM FLOPs of one SwiGLU MLP step: 3 matmuls of 2·tokens·h·d_ff forward, 6 more backward."""
    one = 2 * positive_int("tokens", tokens) * positive_int("h", h) * positive_int("d_ff", d_ff)
    return (9 if backward else 3) * one


def _bytes_needed(tokens: int, h: int, d_ff: int, itemsize: int) -> int:
    # x, dy, dx, out (tokens×h); g/u/a and their grads (tokens×d_ff, ~4); three weights and their grads
    return itemsize * (4 * tokens * h + 4 * tokens * d_ff + 6 * h * d_ff)


def make_mlp_gemms(tokens: int, h: int, d_ff: int, dtype: str = "bf16", device=None, seed: int = 0):
    """Operands on `device` and a function running the MLP's 9 GEMMs (forward and backward).

    Returns (fn, check) where check() compares one forward GEMM with float64 and returns the
    relative error.
    """
    import torch

    from perflab.core import validate
    from perflab.core.device import free_memory_bytes, pick_device
    from perflab.core.dtypes import check_supported
    from perflab.core.timing import check_close, default_tolerance

    dev = torch.device(device) if device is not None else pick_device()
    tokens, h, d_ff = positive_int("tokens", tokens), positive_int("h", h), positive_int("d_ff", d_ff)
    dt = check_supported(dtype, dev)
    if dt.name == "fp8":
        raise InputError("the SwiGLU search runs in bf16, fp16, tf32 or fp32 (fp8 training needs scaling recipes)")
    validate.fits_in_memory(f"a SwiGLU MLP with tokens={tokens}, h={h}, d_ff={d_ff} ({dt.name})",
                            _bytes_needed(tokens, h, d_ff, dt.itemsize), free_memory_bytes(dev))
    g = torch.Generator(device=dev).manual_seed(seed)
    td = dt.torch_dtype

    def rnd(*shape, scale=1.0):
        return torch.randn(*shape, device=dev, dtype=td, generator=g) * scale

    x = rnd(tokens, h)
    w1, w3 = rnd(h, d_ff, scale=h ** -0.5), rnd(h, d_ff, scale=h ** -0.5)
    w2 = rnd(d_ff, h, scale=d_ff ** -0.5)
    a = rnd(tokens, d_ff)  # stands in for silu(x·W1) ⊙ (x·W3)
    dy = rnd(tokens, h)
    dg = rnd(tokens, d_ff)  # stands in for the gradients reaching x·W1 and x·W3
    du = rnd(tokens, d_ff)

    def fn():
        g_ = x @ w1  # forward: gate
        u_ = x @ w3  # forward: up
        y_ = a @ w2  # forward: down
        da = dy @ w2.t()  # backward of W2: input gradient
        dw2 = a.t() @ dy  # backward of W2: weight gradient
        dx = dg @ w1.t() + du @ w3.t()  # backward of W1, W3: input gradients
        dw1 = x.t() @ dg  # weight gradients
        dw3 = x.t() @ du
        return g_, u_, y_, da, dw2, dx, dw1, dw3

    def check() -> float:
        r = min(32, tokens)
        ref = x[:r].to(torch.float64) @ w1.to(torch.float64)
        tol = 5e-3 if dt.name == "tf32" else default_tolerance(td)
        return check_close((x[:r] @ w1), ref, tol=tol, what=f"{dt.name} MLP GEMM").rel_error

    return fn, check


@dataclass
class WidthTiming:
    """The MLP's GEMMs (forward + backward) timed at one width, and the machine while they ran."""

    seconds: float  # median per MLP step
    tflops: float
    iqr_s: float
    spread: float  # IQR / median
    n_reps: int
    rel_error: float  # of the first GEMM against float64, checked before timing
    quietness: Quietness  # the machine while it ran


def measure_width(tokens: int, h: int, d_ff: int, dtype: str = "bf16", device=None, *, warmup_ms: float = 25,
                  rep_ms: float = 100) -> WidthTiming:
    """Time the MLP's GEMMs (forward + backward) at width d_ff: seconds per step, TFLOP/s, the timing's
    relative spread (IQR / median) and the machine's quietness while it ran."""
    import torch

    from perflab.core.device import pick_device
    from perflab.core.dtypes import parse_dtype
    from perflab.core.measure import tf32_mode
    from perflab.core.quietness import of_bench, watch
    from perflab.core.timing import bench

    dev = torch.device(device) if device is not None else pick_device()
    dt = parse_dtype(dtype)
    ctx = tf32_mode(dt.name == "tf32") if dev.type == "cuda" else contextlib.nullcontext()
    with ctx:
        fn, check = make_mlp_gemms(tokens, h, d_ff, dt.name, dev)
        rel = check()
        with watch(dev) as w:
            r = bench(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, device=dev, flush_l2=False,
                      label=f"SwiGLU MLP h={h} d_ff={d_ff}")
    return WidthTiming(r.median_s, mlp_flops(tokens, h, d_ff) / r.median_s / 1e12, r.iqr_s, r.iqr_s / r.median_s,
                       r.n, rel, of_bench(r, w))


@dataclass
class Width:
    """One width of a search: a row of `SwigluSearch.frame` (a frame with fewer columns leaves the
    rest None)."""

    d_ff: int
    tflops: float
    seconds: float | None = None  # per MLP step (fwd+bwd GEMMs)
    params: int | None = None
    params_delta: int | None = None  # against 8/3·h
    params_delta_pct: float | None = None
    ratio: float | None = None  # d_ff / h
    multiple_of: int | None = None  # the largest power of two dividing d_ff
    speedup_vs_baseline: float | None = None
    rank_tflops: int | None = None
    rank_time: int | None = None
    is_baseline: bool | None = None
    status: str | None = None  # 'ok', 'confirmed', 'unstable' or 'unconfirmed' (perflab.core.sweepnoise)
    eligible: bool | None = None  # may win (not a spike that did not repeat)
    disturbed: bool | None = None  # every measurement of it was taken on a busy machine
    measurements: int | None = None
    quietness: str | None = None  # the verdict
    quietness_json: JSON | None = None  # the verdict with its figures

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Width:
        """From a frame's row (NumPy numbers become Python's)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: to_json(v) for k, v in row.items() if k in names})


STATUS_WORDS = {  # a width's status (perflab.core.sweepnoise) as the lesson's table says it
    "ok": "ok",
    "confirmed": "stood out, repeated: may win",
    "unstable": "stood out, did not repeat: cannot win",
    "unconfirmed": "stood out, measured once: cannot win",
}


@dataclass
class SwigluSearch:
    """A measured width search. `frame` is ranked by TFLOP/s (best first) with rank_time too; each
    width's TFLOP/s is the median of its measurements that were not disturbed, after the outlier rule
    of `perflab.core.sweepnoise` (its `status` says 'ok', 'confirmed' or 'unstable', `disturbed`
    whether every measurement of it was)."""

    hidden: int
    tokens: int
    dtype: str
    device_name: str
    baseline: int
    frame: Any  # DataFrame
    path: Any = None
    failed: list[str] = field(default_factory=list)
    noise: float = float("nan")  # the sweep's relative noise σ
    rule: str = ""
    notes: list[str] = field(default_factory=list)
    saved: JSON | None = None  # points served from earlier results: how many, when, how quiet
    remeasured: int = 0

    @property
    def best(self) -> Width:
        """The fastest width that may win (an unstable point, a spike that did not repeat, may not)."""
        ok = self.frame[self.frame["eligible"]] if "eligible" in self.frame else self.frame
        return Width.of((ok if len(ok) else self.frame).iloc[0].to_dict())

    @property
    def baseline_row(self) -> Width | None:
        rows = self.frame[self.frame["d_ff"] == self.baseline]
        return Width.of(rows.iloc[0].to_dict()) if len(rows) else None

    def decision(self, row: Width | None = None, what: str = "the fastest width"):
        """`perflab.core.sweepnoise.Decision` of `row` (default: the best) against the baseline."""
        from perflab.core.sweepnoise import Point, decide, measured

        row = row or self.best
        base = self.baseline_row
        if base is None:
            return None

        def point(r: Width):
            q = r.quietness_json
            return Point(int(r.d_ff), [measured(r.tflops, None, q or {"verdict": r.quietness})])

        return decide(point(row), point(base), self.noise, what)

    def finding(self) -> str:
        """The fastest width against ⌊8/3·h⌋, in one sentence computed from both and the noise."""
        best, base = self.best, self.baseline_row
        if base is None:
            return f"fastest that may win: d_ff = {best.d_ff} at {num(best.tflops)} TFLOP/s (the baseline was not measured)"
        d = self.decision(best)
        return (f"fastest that may win: d_ff = {best.d_ff} at {num(best.tflops)} TFLOP/s (divisible by {best.multiple_of}); "
                f"⌊8/3·h⌋ = {base.d_ff} at {num(base.tflops)} TFLOP/s"
                + (f" ({STATUS_WORDS.get(str(base.status), str(base.status))})" if base.status not in (None, "ok") else "")
                + f" → {num(best.tflops / base.tflops)}×: "
                + (d.text if d else ""))

    @property
    def speedup(self) -> float | None:
        """The fastest width's TFLOP/s ÷ the ⌊8/3·h⌋ width's (None: the baseline was not measured)."""
        base = self.baseline_row
        return self.best.tflops / base.tflops if base is not None else None

    @property
    def speedup_quietness(self) -> Quietness:
        """The machine behind `speedup`: disturbed when the fastest width or the baseline was measured on a
        busy machine every time, else the fastest width's."""
        from perflab.core.quietness import as_quietness

        rows = [r for r in (self.best, self.baseline_row) if r is not None]
        busy = next((r for r in rows if r.disturbed), None)
        return as_quietness((busy or rows[0]).quietness_json)

    def noise_sentence(self) -> str:
        """How the sweep read its noise and its outliers, in words, from what this run did."""
        k = self.frame["status"].value_counts().to_dict() if "status" in self.frame else {}
        busy = int(self.frame["disturbed"].sum()) if "disturbed" in self.frame else 0
        from perflab.core.stats import K

        n = len(self.frame)
        rule = ("the largest of how far the widths measured twice moved between two quiet measurements, a width's own "
                "timing noise, and 1 %")
        if any("not measured" in note for note in self.notes):
            rule = "a width's own timing noise (no width was measured twice), at least 1 %"
        elif busy == n:
            rule = ("a width's own timing noise, at least 1 %: every width was measured on a busy machine, so none was "
                    "measured quietly twice")
        parts = [f"The noise: σ = {num(100 * self.noise, 2)} % of a width's TFLOP/s, {rule}."]
        said = {"confirmed": "repeated when measured again (may win)", "unstable": "did not repeat (cannot win)",
                "unconfirmed": "were measured only once, unconfirmed (cannot win)"}
        stood = {k_: k.get(k_, 0) for k_ in said if k.get(k_, 0)}
        if stood:
            parts.append(f"{sum(stood.values())} width(s) stood more than {K:g} σ above their neighbours: "
                         + ", ".join(f"{v} {said[k_]}" for k_, v in stood.items()) + ".")
        else:
            parts.append(f"No width stood more than {K:g} σ above its neighbours.")
        if busy:
            parts.append(f"{busy} of {len(self.frame)} widths were measured on a busy machine every time: their rows "
                         "say so, and a decision that reads one of them is inconclusive.")
        return " ".join(parts + ([self.saved_note()] if self.saved_note() else []))

    def choice(self, max_params_delta_pct: float = 1.0, where: str = "") -> str:
        """'choose d_ff = …' only when the fastest width within the parameter budget beats the
        baseline beyond the noise; otherwise that it is within the noise, or inconclusive when the
        machine was busy."""
        pick = recommend(self.frame, max_params_delta_pct)
        d = self.decision(pick, f"d_ff = {pick.d_ff}")
        facts = (f"  {num(pick.tflops)} TFLOP/s, {seconds(pick.seconds or 0.0)} per MLP step (fwd+bwd GEMMs), "
                 f"{num(pick.speedup_vs_baseline)}× the ⌊8/3·h⌋ width"
                 + (" (measured on a busy machine every time)" if pick.disturbed else "") + "\n"
                 f"  parameters {pick.params_delta:+,} ({pick.params_delta_pct:+.2f} %) against 8/3·h; "
                 f"divisible by {pick.multiple_of}")
        on = f" on {where}" if where else ""
        if d is None or d.kind == "choose":
            return f"choose d_ff = {pick.d_ff} for h = {self.hidden}{on}:\n{facts}"
        if d.kind == "inconclusive":
            return f"no choice for h = {self.hidden}{on}: {d.text}\n{facts}"
        return (f"no width beats ⌊8/3·h⌋ = {self.baseline} beyond the noise for h = {self.hidden}{on}: {d.text}; "
                f"keep the width your parameter budget prefers\n{facts}")

    def alignment_finding(self) -> str:
        """Whether the aligned widths (divisible by 64, else by 8) ran faster than the rest here, from
        their median TFLOP/s and the sweep's noise. Widths measured on a busy machine every time are left
        out (they are the neighbours' as much as this device's)."""
        import math
        import statistics

        from perflab.core.sweepnoise import K
        from perflab.core.verdicts import busy_text

        df = self.frame[self.frame["eligible"]] if "eligible" in self.frame else self.frame
        busy = df[df["disturbed"]] if "disturbed" in df else df.iloc[0:0]
        df = df[~df["disturbed"]] if "disturbed" in df else df
        for m in (64, 8):
            aligned = df[df["multiple_of"] >= m]["tflops"]
            rest = df[df["multiple_of"] < m]["tflops"]
            if len(aligned) and len(rest):
                break
        else:
            if len(busy):
                cause = _quietness(Width.of(busy.iloc[0].to_dict())).cause
                return (f"{busy_text(cause)}: too few widths were measured on a quiet machine to compare the aligned "
                        "ones with the rest")
            return "every measured width has the same alignment: nothing to compare"
        a, b = statistics.median(aligned), statistics.median(rest)
        margin = math.exp(K * self.noise * math.sqrt(2))
        left = f" ({len(busy)} width(s) measured on a busy machine left out)" if len(busy) else ""
        head = (f"widths divisible by {m} ran at a median {num(a)} TFLOP/s against {num(b)} for the others "
                f"({num(a / b)}×){left}")
        noise = (f"with the sweep's noise, σ = {num(100 * self.noise, 2)} % per width, chance alone moves two widths "
                 f"apart by up to {num(margin)}×")
        if a / b > margin:
            return f"{head}: faster, beyond the noise ({noise})"
        if b / a > margin:
            return f"{head}: slower, beyond the noise ({noise})"
        return f"{head}: within the noise ({noise}), so alignment made no measurable difference here"

    def by_alignment(self):
        """The widths grouped by alignment (a multiple of 64, of 8, neither): how many, and their median and
        best TFLOP/s, from the widths not measured on a busy machine every time."""
        import pandas as pd

        df = self.frame
        quiet = df[~df["disturbed"]] if "disturbed" in df else df
        rows = []
        for name, lo, hi in (("multiple of 64", 64, None), ("multiple of 8, not 64", 8, 64), ("neither", 0, 8)):
            sel = quiet[(quiet["multiple_of"] >= lo) & ((quiet["multiple_of"] < hi) if hi else True)]
            all_ = df[(df["multiple_of"] >= lo) & ((df["multiple_of"] < hi) if hi else True)]
            if not len(all_):
                continue
            rows.append({"alignment": name, "widths": len(all_), "measured on a busy machine": len(all_) - len(sel),
                         "median TFLOP/s (quiet ones)": num(float(sel["tflops"].median())) if len(sel) else "–",
                         "best TFLOP/s (quiet ones)": num(float(sel["tflops"].max())) if len(sel) else "–"})
        return pd.DataFrame(rows)

    def saved_note(self) -> str:
        """'' when every point was measured now; else that (and when, and how quietly) they were saved."""
        from perflab.core.sweepnoise import saved_note

        return saved_note(self.saved, self.path)

    def as_dict(self) -> JSON:
        """The search as `perflab swiglu --json` prints it and a reference file keeps it."""
        cols = ["d_ff", "tflops", "seconds", "params", "params_delta", "params_delta_pct", "ratio", "multiple_of",
                "speedup_vs_baseline", "rank_tflops", "rank_time", "is_baseline", "status", "eligible", "disturbed",
                "measurements", "quietness_json"]
        base = self.baseline_row
        d = self.decision() if base is not None else None
        return {"hidden": self.hidden, "tokens": self.tokens, "dtype": self.dtype, "device": self.device_name,
                "eight_thirds_h": eight_thirds(self.hidden), "baseline": self.baseline,
                "baseline_tflops": base.tflops if base else None, "baseline_seconds": base.seconds if base else None,
                "flops_per_step": "18 · tokens · h · d_ff (3 GEMMs forward, 6 backward)",
                "candidates": [{("quietness" if c == "quietness_json" else c): _py(r.get(c)) for c in cols}
                               for r in self.frame.to_dict("records")],
                "best": self.best.d_ff, "decision": d.as_json() if d else None, "noise": self.noise,
                "rule": self.rule, "notes": self.notes, "remeasured": self.remeasured, "saved": self.saved,
                "failed": self.failed, "results_file": str(self.path) if self.path else None}

    def table(self, n: int | None = None):
        """The widths, fastest first (the first `n`): readable columns with units, each width's status in
        words (`STATUS_WORDS`) and the machine while it was measured (a width measured on a busy machine every
        time says so in both)."""
        import pandas as pd

        rows = []
        for r in (self.frame.head(n) if n else self.frame).to_dict("records"):
            w = Width.of(r)
            status = STATUS_WORDS.get(str(w.status), str(w.status)) if w.status else "ok"
            if w.disturbed:
                status += "; busy every time"
            rows.append({"rank": w.rank_tflops, "d_ff": f"{w.d_ff} (⌊8/3·h⌋)" if w.is_baseline else w.d_ff,
                         "TFLOP/s": num(w.tflops), "time per MLP step": seconds(w.seconds) if w.seconds else "–",
                         "vs ⌊8/3·h⌋ (×)": num(w.speedup_vs_baseline),
                         "parameters vs 8/3·h": f"{w.params_delta or 0:+,} ({w.params_delta_pct or 0.0:+.2f} %)",
                         "divisible by": w.multiple_of, "measured (times)": w.measurements, "status": status,
                         MACHINE: machine(_quietness(w))})
        return pd.DataFrame(rows)


def _quietness(w: Width):
    from perflab.core.quietness import as_quietness

    return as_quietness(w.quietness_json) if w.quietness_json else as_quietness({"verdict": w.quietness or "unknown"})


def _py(v):
    try:
        import numpy as np

        if isinstance(v, np.generic):
            return v.item()
    except ImportError:  # pragma: no cover
        pass
    return v


def search(h: int, tokens: int, *, widths: Iterable[int] | None = None, radius: int = 100, step: int = 4,
           dtype: str = "bf16", device=None, warmup_ms: float = 25, rep_ms: float = 100, repeats: int = 1,
           retries: int = 2, fresh: bool = False, measure: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None,
           name: str | None = None, progress: bool = True) -> SwigluSearch:
    """Measure every candidate width (default `candidate_widths(h, radius, step)`) as a resumable sweep.

    repeats > 1 measures all widths that many times, one full pass after another; each width keeps
    the median of its passes that were not disturbed. Then `perflab.core.sweepnoise.settle`: a width
    measured while the machine was busy, or far from its neighbours beyond the sweep's noise, is
    measured again (up to `retries` times, each saved) before it can win. `fresh` sets the saved
    results aside (renamed, not deleted) and measures everything again; otherwise saved points are
    served from the file and the search says so (`saved_note`). `measure(params)` replaces the real
    measurement (tests inject timings): it returns {'tflops', 'seconds', 'spread', 'quietness'}.
    """
    import torch

    from perflab.core.device import describe, pick_device
    from perflab.core.dtypes import check_supported
    from perflab.core.results import point_key, run_sweep, set_aside, sweep_path
    from perflab.core.sweepnoise import Measured, measured, saved_summary, settle

    dev = torch.device(device) if device is not None else pick_device()
    h, tokens = positive_int("hidden", h), positive_int("tokens", tokens)
    dt = check_supported(dtype, dev)
    ws = sorted({positive_int("d_ff", w) for w in (widths if widths is not None else candidate_widths(h, radius, step))})
    base = baseline_width(h)
    if base not in ws:
        ws = sorted([*ws, base])
    measure_fn: Callable[[dict[str, Any]], Mapping[str, Any]]
    if measure is None:
        make_mlp_gemms(tokens, h, max(ws), dt.name, dev)  # the widest must fit before anything runs

        def _measure_width(p: dict[str, Any]) -> JSON:  # a row of the sweep's results file
            return to_json(measure_width(p["tokens"], p["h"], p["d_ff"], p["dtype"], dev, warmup_ms=warmup_ms,
                                         rep_ms=rep_ms))
        measure_fn = _measure_width
    else:
        measure_fn = measure
    info = describe(dev)
    repeats = positive_int("repeats", repeats, maximum=20)
    sweep = name or f"swiglu_h{h}_t{tokens}_{dt.name}"
    if fresh:
        set_aside(sweep_path(sweep, info.slug))
    pts = [{"h": h, "tokens": tokens, "d_ff": w, "dtype": dt.name, **({"pass": i} if repeats > 1 else {})}
           for i in range(repeats) for w in ws]
    now: set[str] = set()

    def seen(row: dict[str, Any]) -> None:
        now.add(point_key(row["params"]))

    res = run_sweep(sweep, pts, measure_fn, device_slug=info.slug, progress=progress, on_point=seen)
    rows = list(res.rows)

    def measured_row(row: dict[str, Any]) -> Measured:
        return measured(row["tflops"], row.get("spread"), row.get("quietness"), row.get("n_reps"))

    first: dict[int, list[Measured]] = {}
    for r in rows:
        if r.get("status") == "ok":
            first.setdefault(int(r["params"]["d_ff"]), []).append(measured_row(r))

    def again(w, attempt: int) -> Measured:
        p = {"h": h, "tokens": tokens, "d_ff": int(w), "dtype": dt.name, "again": attempt}
        rr = run_sweep(sweep, [p], measure_fn, device_slug=info.slug, progress=False, on_point=seen)
        rows.extend(rr.rows)
        r = rr.rows[0] if rr.rows else {}
        if r.get("status") != "ok":  # a width that failed on its second try keeps its first measurements
            return first[int(w)][0]
        return measured_row(r)

    settled = settle(ws, first, again, retries=retries)
    out = _assemble(h, tokens, dt.name, info.name, base, res, settled)
    out.saved = saved_summary(rows, now)
    return out


def _assemble(h: int, tokens: int, dtype: str, device_name: str, base: int, res, settled=None) -> SwigluSearch:
    import pandas as pd

    from perflab.core.sweepnoise import RULE
    from perflab.gemm.shapes import largest_pow2_divisor

    df = res.ok_frame().copy() if len(res.frame) else pd.DataFrame()
    failed = list(res.messages)
    if not len(df) or settled is None or not settled.points:
        raise InputError(f"no width could be measured ({'; '.join(failed) or 'nothing ran'}): choose smaller sizes")
    recs = []
    for p in settled.points:
        w = int(p.key)
        recs.append({"d_ff": w, "tflops": p.value, "seconds": mlp_flops(tokens, h, w) / p.value / 1e12,
                     "status": p.status, "eligible": p.eligible, "disturbed": p.disturbed,
                     "measurements": len(p.measurements), "quietness": p.quietness.verdict,
                     "quietness_json": p.quietness.to_json()})
    df = pd.DataFrame(recs)
    ref = 8 * h * h
    df["params"] = 3 * h * df["d_ff"]
    df["params_delta"] = df["params"] - ref
    df["params_delta_pct"] = 100 * df["params_delta"] / ref
    df["ratio"] = df["d_ff"] / h
    df["multiple_of"] = [largest_pow2_divisor(int(w)) for w in df["d_ff"]]
    df["is_baseline"] = df["d_ff"] == base
    base_t = next((p.value for p in settled.points if int(p.key) == base), float("nan"))
    df["speedup_vs_baseline"] = df["tflops"] / base_t
    df["rank_time"] = df["seconds"].rank(method="min").astype(int)
    df = df.sort_values(["tflops", "d_ff"], ascending=[False, True]).reset_index(drop=True)
    df["rank_tflops"] = range(1, len(df) + 1)
    return SwigluSearch(h, tokens, dtype, device_name, base, df, res.path, failed, settled.sigma, RULE,
                        list(settled.notes), None, settled.remeasured)


def recommend(frame, max_params_delta_pct: float = 1.0) -> Width:
    """The fastest measured width (highest TFLOP/s) whose parameter change against 8/3·h is within
    ±max_params_delta_pct percent, among the widths that may win (not `eligible` False). `frame` is
    SwigluSearch.frame (or any frame with d_ff, tflops and params_delta_pct). Whether it beats the
    baseline beyond the noise is `SwigluSearch.choice`'s business."""
    if max_params_delta_pct < 0:
        raise InputError("the parameter budget must be ≥ 0 percent")
    ok = frame[frame["params_delta_pct"].abs() <= max_params_delta_pct + 1e-12]
    if "eligible" in ok and ok["eligible"].any():
        ok = ok[ok["eligible"]]
    if not len(ok):
        raise InputError(f"no measured width changes the parameters by at most {max_params_delta_pct}%: widen the budget")
    best = ok.sort_values(["tflops", "d_ff"], ascending=[False, True]).iloc[0]
    return Width.of(best.to_dict())


def search_sized(size: Any, device: Any, *, name: str = "05_swiglu") -> SwigluSearch:
    """Lesson 05's search at a row of its size table (`perflab.gemm.sizes.SWIGLU`): bf16 on a GPU (fp32
    elsewhere, which a CPU runs natively), one pass of every width on a GPU and two elsewhere (a shared
    CPU is noisier)."""
    import torch

    dev = torch.device(device)
    gpu = dev.type == "cuda"
    return search(size.h, size.tokens, radius=size.radius, step=size.step, dtype="bf16" if gpu else "fp32", device=dev,
                  rep_ms=size.rep_ms, warmup_ms=size.warmup_ms, repeats=1 if gpu else 2, name=name)
