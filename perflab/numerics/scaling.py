"""Scaled fp8: one scale per tensor, per row, or per block, computed from the largest |x| it covers.

E4M3 holds ±448 down to 2^−9, about 18 powers of two. A tensor is multiplied by a scale s before the
cast, so that its largest |x| (its *amax*) lands on the format's largest value, and divided by s after:
x̂ = round(x · s) / s with s = max / amax. The finer the granularity, the more scales, and the less one
large value costs the others around it:

* `tensor`: one scale for the whole tensor (torchao's float8 "tensorwise" recipe);
* `row`: one per row, i.e. per token of an activation and per output channel of a weight (torchao's
  "rowwise" recipe; `torch._scaled_mm` takes these as an M×1 and a 1×N scale);
* `1x128` and `128x128`: blocks, DeepSeek-V3's fp8 training (technical report §3.3: 1×128 tiles for
  activations, 128×128 blocks for weights, fp32 scales);
* `mx 1x32`: MX's 32-element blocks with a power-of-two E8M0 scale (OCP Microscaling v1.0, §6.3): the
  shared exponent is ⌊log2 amax⌋ − 8 (8: E4M3's largest exponent), so a block's amax lands in
  [256, 512) and values above 448 saturate.

Rules every granularity here follows (and lab 16's quantizer too): the amax comes from the finite
values (an inf or NaN does not set the scale); an amax below `AMAX_FLOOR` counts as `AMAX_FLOOR`, so
an all-zero block, or one of fp32 denormals, gets a finite scale (torchao clamps at the same 1e-12);
values beyond ±max after scaling, ±inf included, saturate to ±max; NaN stays NaN.

Outliers (`with_outliers`): a few feature columns multiplied by a factor, the same columns in every
row, so that every row (token) holds them: a per-row scale then helps no more than a per-tensor one,
and only blocks along the row keep the outlier's cost inside its own blocks.

Damage is measured three ways (`ScaledError`): the relative error ‖x̂ − x‖ / ‖x‖ (dominated by the
large values), the share of values flushed to zero, and the share that **lost precision**: whose
rounding error exceeds the format's unit roundoff 2^−(m+1), which only values pushed into the
subnormal range (or to zero) by a scale set for larger values do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from perflab.core.errors import InputError
from perflab.numerics.formats import E4M3, E5M2, FloatFormat

AMAX_FLOOR = 1e-12  # torchao.float8's EPS: an amax below it is taken as it
GRANULARITIES = ("tensor", "row", "1x128", "128x128", "mx 1x32")
SPAN_ROWS, SPAN_VALUES = 64, 65536  # what `span` reads of a tensor
OUTLIER_COLUMNS = 2  # pairs of neighbouring columns `with_outliers` scales up


def block_shape(granularity: str, rows: int, cols: int) -> tuple[int, int]:
    """(rows, columns) one scale covers."""
    return {"tensor": (rows, cols), "row": (1, cols), "1x128": (1, 128), "128x128": (128, 128),
            "mx 1x32": (1, 32)}[_check(granularity)]


def _check(granularity: str) -> str:
    if granularity not in GRANULARITIES:
        raise InputError(f"unknown granularity {granularity!r}: use one of {', '.join(GRANULARITIES)}")
    return granularity


def scale_bytes_per_value(granularity: str, rows: int, cols: int) -> float:
    """Bytes of scale per element: fp32 scales, except MX's one-byte E8M0."""
    br, bc = block_shape(granularity, rows, cols)
    return (1.0 if granularity == "mx 1x32" else 4.0) / (min(br, rows) * min(bc, cols))


def _as_2d(x: torch.Tensor) -> torch.Tensor:
    x = x.detach().float()
    return x.reshape(1, -1) if x.dim() < 2 else x.reshape(-1, x.shape[-1])


def quantize(x: torch.Tensor, granularity: str = "row", fmt: FloatFormat = E4M3) -> tuple[torch.Tensor, torch.Tensor]:
    """(x̂, scales): `x` scaled per `granularity`, rounded to `fmt` (saturating) and scaled back, as fp32 of
    x's 2-D shape (tokens × features); `scales` has one entry per block (rows/br × cols/bc)."""
    x2 = _as_2d(x)
    r, c = x2.shape
    br, bc = block_shape(granularity, r, c)
    br, bc = min(br, r), min(bc, c)
    pr, pc = -r % br, -c % bc
    xp = torch.nn.functional.pad(x2, (0, pc, 0, pr)) if pr or pc else x2
    blocks = xp.reshape(xp.shape[0] // br, br, xp.shape[1] // bc, bc)
    finite = torch.where(torch.isfinite(blocks), blocks.abs(), torch.zeros((), dtype=blocks.dtype))
    amax = finite.amax(dim=(1, 3), keepdim=True).clamp(min=AMAX_FLOOR)
    if granularity == "mx 1x32":  # power-of-two scale: 2^(emax_elem - floor(log2 amax))
        shared = torch.floor(torch.log2(amax)) - fmt.max_exponent
        scale = torch.exp2(-shared.clamp(-127, 127))
    else:
        scale = fmt.max / amax
    q = (blocks * scale).clamp(-fmt.max, fmt.max).to(fmt.torch_dtype()).float()
    back = (q / scale).reshape(xp.shape)[:r, :c]
    return back, scale.reshape(scale.shape[0], scale.shape[2])


def outlier_columns(cols: int, pairs: int = OUTLIER_COLUMNS) -> list[int]:
    """The columns `with_outliers` scales: `pairs` pairs of neighbours, at 1/8 and 5/8 of the width (so
    that with 512 features they fall in two of the four 128-wide blocks and two of the sixteen 32-wide ones)."""
    starts = [cols // 8 + i * cols // 2 for i in range(pairs)]
    return sorted({min(cols - 1, s + d) for s in starts for d in (0, 1)})


def with_outliers(x: torch.Tensor, factor: float, pairs: int = OUTLIER_COLUMNS) -> tuple[torch.Tensor, torch.Tensor]:
    """(x with the `outlier_columns` multiplied by `factor`, the mask of those values)."""
    x2 = _as_2d(x).clone()
    cols = torch.tensor(outlier_columns(x2.shape[1], pairs), dtype=torch.long)
    mask = torch.zeros_like(x2, dtype=torch.bool)
    mask[:, cols] = True
    x2[:, cols] *= float(factor)
    return x2, mask


@dataclass(frozen=True)
class ScaledError:
    """One tensor quantized at one granularity."""

    granularity: str
    fmt: str
    rel_error: float  # ‖x̂ − x‖ / ‖x‖ over every finite value
    ordinary_error: float  # the same over the values that are not outliers
    flushed: float  # share of non-zero values that became 0
    imprecise: float  # share of non-zero values whose error exceeds the unit roundoff (subnormal or flushed)
    scale_bytes: float  # bytes of scale per value


def scaled_error(x: torch.Tensor, granularity: str, fmt: FloatFormat = E4M3,
                 outliers: torch.Tensor | None = None) -> ScaledError:
    """Quantize `x` at `granularity` in `fmt` and measure the error (`outliers`: a mask of values to
    leave out of `ordinary_error`)."""
    x2 = _as_2d(x)
    back, _ = quantize(x2, granularity, fmt)
    ok = torch.isfinite(x2)
    ordinary = ok if outliers is None else ok & ~outliers
    nz = ok & (x2 != 0)
    n_nz = max(1, int(nz.sum()))
    bad = nz & ((back - x2).abs() > fmt.unit_roundoff * (1 + 1e-5) * x2.abs())
    r, c = x2.shape
    return ScaledError(granularity, fmt.name, _rel(back, x2, ok), _rel(back, x2, ordinary),
                       float((nz & (back == 0)).sum()) / n_nz, float(bad.sum()) / n_nz,
                       scale_bytes_per_value(granularity, r, c))


def _rel(back: torch.Tensor, x: torch.Tensor, mask: torch.Tensor) -> float:
    zero = torch.zeros((), dtype=x.dtype)
    den = torch.linalg.vector_norm(torch.where(mask, x, zero), dtype=torch.float64)
    num = torch.linalg.vector_norm(torch.where(mask, back - x, zero), dtype=torch.float64)
    return float(num / den) if float(den) > 0 else math.nan


@dataclass(frozen=True)
class ScalingTable:
    """One tensor (`what`) at every granularity, with and without outliers."""

    what: str
    shape: tuple[int, int]
    outlier_factor: float
    rows: tuple[ScaledError, ...]

    def error(self, granularity: str) -> ScaledError:
        return next(r for r in self.rows if r.granularity == granularity)

    def table(self):
        import pandas as pd

        from perflab.core.readout import num, percent

        rows = [{"granularity": r.granularity, "relative error (all values)": num(r.rel_error, 2),
                 "relative error (ordinary values)": num(r.ordinary_error, 2), "lost precision": percent(r.imprecise, 2),
                 "flushed to zero": percent(r.flushed, 2), "scale bytes per value": num(r.scale_bytes, 2)}
                for r in self.rows]
        return pd.DataFrame(rows).set_index("granularity")


def compare(x: torch.Tensor, what: str, outlier_factor: float = 1.0, fmt: FloatFormat = E4M3,
            granularities: Sequence[str] = GRANULARITIES) -> ScalingTable:
    """Every granularity on `x` (with `OUTLIER_COLUMNS` columns × `outlier_factor` when above 1)."""
    x2, mask = with_outliers(x, outlier_factor) if outlier_factor != 1 else (_as_2d(x), None)
    rows = tuple(scaled_error(x2, g, fmt, mask) for g in granularities)
    return ScalingTable(what, (int(x2.shape[0]), int(x2.shape[1])), float(outlier_factor), rows)


# ---------------------------------------------------------------- E4M3 forward, E5M2 backward


@dataclass(frozen=True)
class Pooled:
    """One tensor kind, every layer's tensor quantized on its own, the errors pooled over the layers."""

    what: str
    granularity: str
    fmt: str
    rel_error: float  # √(Σ‖x̂ − x‖²) / √(Σ‖x‖²) over the layers
    flushed: float  # share of all non-zero values
    imprecise: float
    span: float  # median over the layers of `span` (powers of two one scale must hold)


@dataclass(frozen=True)
class FormatChoice:
    """Activations and activation gradients of every layer in E4M3 and E5M2, tensorwise and rowwise."""

    rows: tuple[Pooled, ...]

    def get(self, what: str, granularity: str, fmt: str) -> Pooled:
        return next(r for r in self.rows if (r.what, r.granularity, r.fmt) == (what, granularity, fmt))

    def table(self):
        import pandas as pd

        from perflab.core.readout import num, percent

        out = [{"tensors": r.what, "scaling": r.granularity, "format": r.fmt, "relative error": num(r.rel_error, 2),
                "lost precision": percent(r.imprecise, 2), "flushed to zero": percent(r.flushed, 2),
                "span one scale holds (powers of two)": num(r.span)} for r in self.rows]
        return pd.DataFrame(out).set_index(["tensors", "scaling", "format"])


def span(x: torch.Tensor, granularity: str) -> float:
    """Powers of two from a scale's amax down to the 1st percentile of the non-zero |x| it covers (the
    median over rows for `row`): the range one scale must hold for 99 % of its values. Read on at most
    `SPAN_ROWS` evenly spaced rows, or `SPAN_VALUES` evenly spaced values for a whole tensor."""
    x2 = _as_2d(x).abs()
    if granularity == "tensor":
        flat = x2.reshape(-1)
        groups = flat[:: max(1, flat.numel() // SPAN_VALUES)].reshape(1, -1)
    else:
        groups = x2[:: max(1, x2.shape[0] // SPAN_ROWS)]
    keep = torch.isfinite(groups) & (groups > 0)
    vals = torch.where(keep, groups, torch.full((), math.nan)).double()
    ok = keep.sum(dim=-1) >= 2
    if not bool(ok.any()):
        return math.nan
    vals = vals[ok]
    spans = torch.log2(vals.nan_to_num(nan=0.0).amax(dim=-1) / torch.nanquantile(vals, 0.01, dim=-1))
    return float(spans.median())


def format_choice(kinds: dict[str, dict[str, torch.Tensor]], granularities: Sequence[str] = ("tensor", "row"),
                  formats: Sequence[FloatFormat] = (E4M3, E5M2)) -> FormatChoice:
    """For each tensor kind (kind -> {layer: tensor}), each granularity and format: every layer's tensor
    quantized on its own, the errors pooled (`Pooled`)."""
    rows = []
    for what, layers in kinds.items():
        for g in granularities:
            sp = float(torch.tensor([span(x, g) for x in layers.values()]).median())
            for fmt in formats:
                err2 = ref2 = 0.0
                n_nz = flushed = bad = 0
                for x in layers.values():
                    x2 = _as_2d(x)
                    back, _ = quantize(x2, g, fmt)
                    ok = torch.isfinite(x2)
                    nz = ok & (x2 != 0)
                    err2 += float(((back - x2)[ok].double() ** 2).sum())
                    ref2 += float((x2[ok].double() ** 2).sum())
                    n_nz += int(nz.sum())
                    flushed += int((nz & (back == 0)).sum())
                    bad += int((nz & ((back - x2).abs() > fmt.unit_roundoff * (1 + 1e-5) * x2.abs())).sum())
                rows.append(Pooled(what, g, fmt.name, math.sqrt(err2 / ref2) if ref2 > 0 else math.nan,
                                   flushed / max(1, n_nz), bad / max(1, n_nz), sp))
    return FormatChoice(tuple(rows))
