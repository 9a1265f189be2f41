"""Cast a tensor into a format and back to fp32, and say what the trip cost: error, overflow, flush to zero.

`round_to(x, fmt)` rounds an fp32 tensor to the nearest value of `fmt` (round to nearest, ties to
even) and returns it as fp32. bf16, fp16 and both fp8 formats go through torch's own casts; TF32 has no
torch dtype, so its 23-bit fp32 mantissa is rounded to 10 bits on the bit pattern (the same rounding
torch's bf16 cast does to 7 bits, which the tests check). Values beyond the format's largest finite
value saturate to ±max here (torchao's casts do the same; OCP's non-saturating conversion gives inf or
NaN instead), so that what overflowed is counted once, in `overflow`, and never turns a whole error
into inf. NaN stays NaN.

`trip(x, fmt)` describes one tensor's trip:

* **overflow**: share of the finite non-zero values with |x| > the format's largest value;
* **flushed to zero**: share of the non-zero values whose nearest value in the format is 0
  (below half the smallest subnormal);
* **subnormal**: share that lands between 0 and the smallest normal, where fewer mantissa bits are left;
* **relative error**: ‖x̂ − x‖ / ‖x‖ over the values that neither overflow nor flush (their rounding),
  an RMS relative error weighted by magnitude.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from perflab.numerics.formats import FORMATS, FP32, FloatFormat


def round_mantissa(x: torch.Tensor, man_bits: int) -> torch.Tensor:
    """fp32 `x` with its mantissa rounded to `man_bits` bits (nearest, ties to even), as fp32.

    Keeps fp32's 8-bit exponent, so it is the value in a 1-8-`man_bits` format (TF32 at 10 bits, bf16
    at 7). A carry out of the mantissa bumps the exponent, as it should; past the largest value it
    gives inf. inf and NaN pass unchanged."""
    x = x.float().contiguous()
    drop = 23 - int(man_bits)
    if drop <= 0:
        return x.clone()
    bits = x.view(torch.int32)
    lsb = (bits >> drop) & 1
    rounded = (bits + ((1 << (drop - 1)) - 1) + lsb) & ~((1 << drop) - 1)
    return torch.where(torch.isfinite(x), rounded.view(torch.float32), x)


def round_to(x: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """`x` rounded to `fmt` and back to fp32; beyond ±max saturates to ±max (module docstring)."""
    xf = x.detach().float()
    if fmt is FP32 or (fmt.exp_bits == 8 and fmt.man_bits == 23):
        return xf.clone()
    clipped = xf.clamp(-fmt.max, fmt.max)  # clamp keeps NaN
    dt = fmt.torch_dtype()
    if dt is None:  # TF32: fp32's exponent, so only the mantissa moves
        return round_mantissa(clipped, fmt.man_bits).clamp(-fmt.max, fmt.max)
    return clipped.to(dt).float()


@dataclass(frozen=True)
class Trip:
    """One tensor cast into one format and back."""

    what: str  # e.g. "weights"
    fmt: str
    n: int  # values
    nonzero: int
    rel_error: float  # over the values kept in range
    overflow: float  # shares of the non-zero values
    flushed: float
    subnormal: float

    @property
    def lost(self) -> float:
        """Share of the non-zero values that did not survive as a number near themselves."""
        return self.overflow + self.flushed


def trip(x: torch.Tensor, fmt: FloatFormat, what: str = "") -> Trip:
    """Cast `x` into `fmt` and back; the error and the shares that overflow, flush and go subnormal."""
    xf = x.detach().float().reshape(-1)
    finite = torch.isfinite(xf)
    xf = torch.where(finite, xf, torch.zeros((), dtype=xf.dtype))  # inf and NaN are left out (as zeros)
    back = round_to(xf, fmt)
    mag = xf.abs()
    nz = mag > 0
    n_nz = int(nz.sum())
    over = mag > fmt.max
    flushed = nz & (back == 0)
    sub = ~flushed & nz & (mag < fmt.smallest_normal)
    kept = nz & ~over & ~flushed
    zero = torch.zeros((), dtype=xf.dtype)
    num = torch.linalg.vector_norm(torch.where(kept, back - xf, zero), dtype=torch.float64)
    den = torch.linalg.vector_norm(torch.where(kept, xf, zero), dtype=torch.float64)
    rel = float(num / den) if float(den) > 0 else math.nan
    share = (lambda m: float(m.sum()) / n_nz) if n_nz else (lambda m: 0.0)
    return Trip(what, fmt.name, int(finite.sum()), n_nz, rel, share(over), share(flushed), share(sub))


def nonzero_range(x: torch.Tensor) -> tuple[float, float]:
    """(smallest, largest) |x| of the finite non-zero values (nan, nan when there are none)."""
    a = x.detach().float().abs().reshape(-1)
    a = a[torch.isfinite(a) & (a > 0)]
    if a.numel() == 0:
        return math.nan, math.nan
    return float(a.min()), float(a.max())


@dataclass(frozen=True)
class TripTable:
    """Every tensor kind of a step through every format (`trips`)."""

    trips: tuple[Trip, ...]
    ranges: Mapping[str, tuple[float, float]]  # what -> (smallest, largest) non-zero |x|

    def get(self, what: str, fmt: str) -> Trip:
        for t in self.trips:
            if t.what == what and t.fmt == fmt:
                return t
        raise KeyError(f"no trip of {what!r} through {fmt!r}")

    def table(self):
        import pandas as pd

        from perflab.core.readout import num, percent

        rows = [{"tensors": t.what, "format": t.fmt, "relative error (kept values)": num(t.rel_error, 2),
                 "overflow": percent(t.overflow, 2), "flushed to zero": percent(t.flushed, 2),
                 "subnormal": percent(t.subnormal, 2)} for t in self.trips]
        return pd.DataFrame(rows).set_index(["tensors", "format"])

    def range_table(self):
        import pandas as pd

        from perflab.core.readout import num

        rows = [{"tensors": w, "smallest non-zero |x|": num(lo), "largest |x|": num(hi),
                 "span (powers of two)": num(math.log2(hi / lo)) if lo > 0 else "–"} for w, (lo, hi) in self.ranges.items()]
        return pd.DataFrame(rows).set_index("tensors")


def trips(tensors: Mapping[str, torch.Tensor], formats: Sequence[FloatFormat] = FORMATS) -> TripTable:
    """`trip` for every (tensor kind, format): the lesson's section 2 table."""
    out = [trip(x, f, what) for what, x in tensors.items() for f in formats]
    return TripTable(tuple(out), {w: nonzero_range(x) for w, x in tensors.items()})
