"""Attention heads: how the head size h/a changes the speed of scaled-dot-product attention.

For a fixed hidden size h, choosing a heads gives head size d = h/a. Attention's two batched
matmuls, S = Q·Kᵀ (s×d by d×s) and O = P·V (s×s by s×d), have d as their reduction or output
dimension, so d decides how well the kernels' tiles fit: kernels are built for a few head sizes
and pad the rest, and a small d means little work per byte. Anthony et al. ("The Case for
Co-Designing Model Architectures with Hardware", arXiv:2401.14489) found that the largest h/a,
and h/a a multiple of 64, run fastest; GPT-3 2.7B's h/a = 80 is one of their slow examples.

FLOPs of the forward pass (non-causal): 2 · b·a·s²·d for Q·Kᵀ plus the same for P·V,
so 4·b·a·s²·d = 4·b·s²·h — the same for every split of h, which is why TFLOP/s compares them.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, to_json
from perflab.core.validate import positive_int


def sdpa_flops(b: int, a: int, s: int, d: int, causal: bool = False) -> int:
    """Forward FLOPs of attention's two matmuls: 4·b·a·s²·d (half of it with a causal mask)."""
    f = 4 * positive_int("b", b) * positive_int("a", a) * positive_int("s", s) ** 2 * positive_int("d", d)
    return f // 2 if causal else f


def head_splits(h: int, min_d: int = 16, max_d: int = 256) -> list[tuple[int, int]]:
    """Every (a, d) with a·d = h and min_d ≤ d ≤ max_d, by head size: h = 2560 → (160, 16), ..., (32, 80), ..."""
    h = positive_int("h", h)
    out = [(h // d, d) for d in range(positive_int("min_d", min_d), positive_int("max_d", max_d) + 1) if h % d == 0]
    if not out:
        raise InputError(f"h={h} has no head size between {min_d} and {max_d}: choose an h with more divisors (e.g. 2560)")
    return out


def padded_efficiency(d: int, pad: int = 32) -> float:
    """Model: a kernel that pads the head size up to a multiple of `pad` does useful work d / ⌈d/pad⌉·pad."""
    d, pad = positive_int("d", d), positive_int("pad", pad)
    return d / (math.ceil(d / pad) * pad)


@dataclass
class HeadModel:
    """The tile/wave model of Q·Kᵀ for one split of h into heads, times the head size's padding."""

    tiles: int
    waves: int
    tile_utilization: float
    wave_utilization: float
    pad_utilization: float  # d over d padded to the kernel's multiple
    utilization: float  # the three multiplied


def predicted_head_utilization(b: int, a: int, s: int, d: int, *, sms: int, tile=(128, 128), pad: int = 32,
                               blocks_per_sm: int = 1) -> HeadModel:
    """The tile/wave model of Q·Kᵀ as b·a independent s×s outputs, times the head-size padding.

    tiles = b·a·⌈s/tile_m⌉·⌈s/tile_n⌉ spread over `sms`; utilization = padding efficiency of d ×
    tile utilization × wave utilization. A model of where steps fall, not of a specific kernel.
    """
    from perflab.gemm.shapes import ceil_div, parse_tile

    tm, tn = parse_tile(tile)
    per = ceil_div(s, tm) * ceil_div(s, tn)
    tiles = positive_int("b", b) * positive_int("a", a) * per
    wave = positive_int("sms", sms) * positive_int("blocks_per_sm", blocks_per_sm)
    waves = ceil_div(tiles, wave)
    tile_u = s * s / (per * tm * tn)
    wave_u = tiles / (waves * wave)
    pad_u = padded_efficiency(d, pad)
    return HeadModel(tiles, waves, tile_u, wave_u, pad_u, tile_u * wave_u * pad_u)


def _reference_attention(q, k, v, causal: bool):
    import torch

    qd, kd, vd = (t.to(torch.float64) for t in (q, k, v))
    scores = qd @ kd.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:  # query i (counted from 0) sees keys 0..i
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ vd


@dataclass
class SdpaTiming:
    """scaled_dot_product_attention's forward timed on one shape, checked first."""

    seconds: float  # median
    tflops: float  # of the two matmuls (`sdpa_flops`)
    flops: int
    iqr_s: float
    spread: float  # IQR / median
    n_reps: int
    rel_error: float  # of the first head's output against a float64 softmax(QKᵀ/√d)·V
    quietness: Any = None  # perflab.core.quietness.Quietness: the machine while it ran (None: not watched)


def measure_sdpa(b: int, a: int, s: int, d: int, dtype: str = "bf16", device=None, *, causal: bool = False,
                 warmup_ms: float = 25, rep_ms: float = 100) -> SdpaTiming:
    """Time torch's scaled_dot_product_attention forward on (b, a, s, d) inputs; check it first.

    Returns seconds, TFLOP/s (of the two matmuls, `sdpa_flops`) and the relative error of the first
    head's output against a float64 softmax(QKᵀ/√d)·V.
    """
    import torch
    import torch.nn.functional as F

    from perflab.core import validate
    from perflab.core.device import free_memory_bytes, pick_device
    from perflab.core.dtypes import check_supported
    from perflab.core.measure import tf32_mode
    from perflab.core.timing import bench, check_close, default_tolerance

    dev = torch.device(device) if device is not None else pick_device()
    b, a, s, d = (positive_int(n, v) for n, v in (("b", b), ("a", a), ("s", s), ("d", d)))
    dt = check_supported(dtype, dev)
    if dt.name == "fp8":
        raise InputError("attention is measured in bf16, fp16, tf32 or fp32")
    # q, k, v, output, and (for the math path on a CPU) the s×s scores of every head
    need = dt.itemsize * 4 * b * a * s * d + (4 * b * a * s * s if dev.type != "cuda" else 0)
    validate.fits_in_memory(f"attention with b={b}, a={a}, s={s}, d={d}", need, free_memory_bytes(dev))
    g = torch.Generator(device=dev).manual_seed(0)
    q, k, v = (torch.randn(b, a, s, d, device=dev, dtype=dt.torch_dtype, generator=g) for _ in range(3))
    ctx = tf32_mode(dt.name == "tf32") if dev.type == "cuda" else contextlib.nullcontext()
    with ctx:
        def fn():
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        out = fn()
        rows = min(s, 64)
        ref = _reference_attention(q[:1, :1, :rows], k[:1, :1], v[:1, :1], causal)
        tol = 5e-3 if dt.name == "tf32" else default_tolerance(dt.torch_dtype)
        rel = check_close(out[:1, :1, :rows], ref, tol=tol, what="attention output").rel_error
        r = bench(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, device=dev, flush_l2=False,
                  label=f"sdpa b={b} a={a} s={s} d={d}")
    flops = sdpa_flops(b, a, s, d, causal)
    return SdpaTiming(r.median_s, flops / r.median_s / 1e12, flops, r.iqr_s, r.iqr_s / r.median_s, r.n, rel,
                      getattr(r, "quietness", None))


def _sdpa_row(p: dict[str, Any], device, causal: bool, warmup_ms: float, rep_ms: float) -> JSON:
    """`measure_sdpa` at a sweep's point, as a row of its results file."""
    return to_json(measure_sdpa(p["b"], p["a"], p["s"], p["d"], p["dtype"], device, causal=causal,
                                warmup_ms=warmup_ms, rep_ms=rep_ms))


def sweep_head_size(h: int, *, b: int, s: int, dtype: str = "bf16", device=None, splits=None, causal: bool = False,
                    min_d: int = 16, max_d: int = 256, warmup_ms: float = 10, rep_ms: float = 50,
                    name: str | None = None, progress: bool = True):
    """Measure attention for every split of h into a heads of size d (a resumable sweep).

    Returns perflab.core.results.SweepResult; rows carry a, d, h, seconds, tflops.
    """
    import torch

    from perflab.core.device import describe, pick_device
    from perflab.core.dtypes import parse_dtype
    from perflab.core.results import run_sweep

    dev = torch.device(device) if device is not None else pick_device()
    dt = parse_dtype(dtype)
    pairs = splits if splits is not None else head_splits(h, min_d, max_d)
    pts = [{"h": int(a) * int(d), "a": int(a), "d": int(d), "b": int(b), "s": int(s), "dtype": dt.name,
            "causal": bool(causal)} for a, d in pairs]
    return run_sweep(name or f"heads_h{h}_s{s}_{dt.name}", pts,
                     lambda p: _sdpa_row(p, dev, p["causal"], warmup_ms, rep_ms),
                     device_slug=describe(dev).slug, progress=progress)


@dataclass
class HeadWinner:
    """The fastest head size of a sweep, after `perflab.core.sweepnoise`'s rule, and what can be said."""

    d: int | None
    tflops: float | None
    text: str
    decisive: bool  # beyond the noise of every other head size, measured on a quiet machine
    noise: float


def fastest_head_size(result, *, device=None, warmup_ms: float = 10, rep_ms: float = 50, retries: int = 2,
                      measure=None) -> HeadWinner:
    """The fastest head size of a `sweep_head_size` result. A head size far from its neighbours
    beyond the sweep's noise, or measured while the machine was busy, is measured again (up to
    `retries` times) before it can win; then the winner is compared with the runner-up: beyond
    the noise, within it, or inconclusive (busy). `measure(params)` replaces the real timing (tests)."""
    from perflab.core.sweepnoise import Measured, decide, measured, settle

    rows = {int(r["params"]["d"]): r for r in result.rows if r.get("status") == "ok"}
    if not rows:
        return HeadWinner(None, None, "no head size could be measured", False, float("nan"))

    def m_of(r) -> Measured:
        return measured(r["tflops"], r.get("spread"), r.get("quietness"), r.get("n_reps"))

    def again(d, attempt: int) -> Measured:
        p = rows[int(d)]["params"]
        r = (measure or (lambda q: _sdpa_row(q, device, q["causal"], warmup_ms, rep_ms)))(p)
        return m_of(r)

    keys = sorted(rows)
    st = settle(keys, {d: [m_of(rows[d])] for d in keys}, again, retries=retries)
    best = st.best()
    if best is None:
        return HeadWinner(None, None, "no head size repeated its figure: the sweep cannot name the fastest", False,
                          st.sigma)
    others = [p for p in st.points if p.key != best.key and p.eligible]
    runner_up = max(others, key=lambda p: p.value, default=None)
    best_d = int(best.key)
    head = f"fastest: d = {best.key} at {best.value:.4g} TFLOP/s"
    if runner_up is None:
        return HeadWinner(best_d, best.value, head, False, st.sigma)
    dec = decide(best, runner_up, st.sigma, f"d = {best.key}")
    if dec.kind == "inconclusive":
        return HeadWinner(best_d, best.value, f"{head}; {dec.text}", False, st.sigma)
    vs = f"the next fastest, d = {runner_up.key} ({runner_up.value:.4g} TFLOP/s)"
    if dec.kind == "choose":
        return HeadWinner(best_d, best.value, f"{head}, {dec.speedup:.2f}× {vs}: beyond the noise", True,
                          st.sigma)
    return HeadWinner(best_d, best.value,
                      f"{head}, but only {dec.speedup:.2f}× {vs}: within the noise (a real gap needs > "
                      f"{dec.margin:.2f}×), so the sweep cannot tell them apart", False, st.sigma)


# ---------------------------------------------------------------- the lesson's sweep, measured and judged

ENDS = ("the largest d", "one in between", "the smallest d")  # lesson 04's question: which end is fastest


@dataclass
class HeadSizes:
    """Attention over every split of h into heads, measured (`sweep_head_size`), with its fastest head size
    judged against the sweep's noise (`fastest_head_size`)."""

    h: int
    b: int
    s: int
    sweep: Any  # perflab.core.results.SweepResult
    winner: HeadWinner

    @property
    def frame(self):
        """The measured rows, by head size."""
        return self.sweep.ok_frame().sort_values("d")

    def answer(self) -> str | None:
        """Which end of the sweep is fastest (`ENDS`), or None when the sweep cannot say: its fastest head size
        is not beyond the noise of every other (or was measured on a busy machine)."""
        if self.winner.d is None or not self.winner.decisive:
            return None
        ds = list(self.frame["d"])
        return ENDS[0] if self.winner.d == max(ds) else ENDS[2] if self.winner.d == min(ds) else ENDS[1]

    def table(self):
        """Heads, head size, median time and TFLOP/s, as a person reads them."""
        import pandas as pd

        from perflab.core.readout import num, seconds

        return pd.DataFrame([{"heads a": int(r["a"]), "head size d": int(r["d"]), "time": seconds(r["seconds"]),
                              "TFLOP/s": num(r["tflops"])} for r in self.frame.to_dict("records")])


def measure_head_sizes(h: int, *, b: int, s: int, dtype: str = "bf16", device=None, min_d: int = 16,
                       max_d: int = 256, warmup_ms: float = 10, rep_ms: float = 50, name: str | None = None,
                       progress: bool = True) -> HeadSizes:
    """`sweep_head_size`, then `fastest_head_size` on it with the same timing budgets."""
    res = sweep_head_size(h, b=b, s=s, dtype=dtype, device=device, min_d=min_d, max_d=max_d, warmup_ms=warmup_ms,
                          rep_ms=rep_ms, name=name, progress=progress)
    return HeadSizes(int(h), int(b), int(s), res, fastest_head_size(res, device=device, warmup_ms=warmup_ms,
                                                                     rep_ms=rep_ms))
