"""Floating-point formats from their bit layout: every figure of lesson 16's first table is computed here.

A binary floating-point format with e exponent bits and m mantissa (fraction) bits stores
(−1)^s · 2^(E − bias) · 1.f for a normal number and (−1)^s · 2^(1 − bias) · 0.f for a subnormal one
(exponent field E = 0), with bias = 2^(e−1) − 1 (IEEE 754-2019, §3.4). From the layout alone:

* spacing near 1 (the gap from 1 to the next number, machine epsilon): 2^−m;
* smallest normal: 2^(1 − bias); smallest subnormal: 2^(1 − bias − m);
* largest finite value, by how the format spends its top exponent field:
  - `ieee` (fp32, TF32, bf16, fp16, fp8 E5M2): the all-ones exponent is for ±inf and NaN, so the
    largest finite number is (2 − 2^−m) · 2^(2^e − 2 − bias);
  - `fn` (fp8 E4M3, "finite, NaN"): no infinities; only S.1111.111 is NaN, so the top exponent holds
    numbers and the largest is (2 − 2·2^−m) · 2^(2^e − 1 − bias) = 448 (OCP OFP8 specification, Table 1;
    Micikevicius et al. 2022, arXiv 2209.05433, Table 1);
  - `e8m0` (the MX block scale): unsigned, exponent only, every code but 0xFF (NaN) a power of two
    2^(E − 127), so no zero and no subnormals (OCP Microscaling Formats v1.0, §5.4).

TF32 (1-8-10: fp32's exponent, fp16's mantissa) is a math mode of NVIDIA Tensor Cores, not a storage
type, so torch has no dtype for it: its figures come from the layout alone. For every format torch
does have, `finfo_check` compares the layout's figures with `torch.finfo`, and the tests hold them equal.

MX block formats (OCP Microscaling v1.0, §5): k = 32 elements share one E8M0 scale, so an MXFP8
block costs 32·8 + 8 bits, 8.25 bits per element (`MXFormat`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perflab.core.errors import InputError

KINDS = ("ieee", "fn", "e8m0")


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format by its layout (sign, exponent and mantissa bits)."""

    name: str  # short name used across the lesson: fp32, tf32, bf16, fp16, e4m3, e5m2, e8m0
    label: str  # what a person calls it
    exp_bits: int
    man_bits: int
    kind: str = "ieee"  # how the top exponent field is spent (module docstring)
    torch_name: str | None = None  # torch dtype attribute; None: no storage type (TF32)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InputError(f"kind must be one of {', '.join(KINDS)} (got {self.kind!r})")
        if self.exp_bits < 2 or self.man_bits < 0:
            raise InputError(f"a format needs ≥ 2 exponent bits and ≥ 0 mantissa bits (got {self.exp_bits}, {self.man_bits})")

    @property
    def sign_bits(self) -> int:
        return 0 if self.kind == "e8m0" else 1

    @property
    def bits(self) -> int:
        return self.sign_bits + self.exp_bits + self.man_bits

    @property
    def layout(self) -> str:
        """'1-8-23': sign, exponent and mantissa bits."""
        return f"{self.sign_bits}-{self.exp_bits}-{self.man_bits}"

    @property
    def bias(self) -> int:
        return 2 ** (self.exp_bits - 1) - 1

    @property
    def max_exponent(self) -> int:
        """The largest finite number's unbiased exponent."""
        top = 2**self.exp_bits - 1  # the all-ones exponent field
        return (top if self.kind == "fn" else top - 1) - self.bias  # ieee: inf and NaN; e8m0: 0xFF is NaN

    @property
    def max(self) -> float:
        """The largest finite value."""
        if self.kind == "e8m0":
            return 2.0**self.max_exponent  # 0xFE
        ulp = 2.0**-self.man_bits
        top_mantissa = 2 - (2 * ulp if self.kind == "fn" else ulp)  # fn: S.1…1.1…1 is NaN
        return top_mantissa * 2.0**self.max_exponent

    @property
    def smallest_normal(self) -> float:
        if self.kind == "e8m0":
            return 2.0**-self.bias  # code 0: no zero, every code a normal power of two
        return 2.0 ** (1 - self.bias)

    @property
    def smallest_subnormal(self) -> float:
        if self.kind == "e8m0":
            return self.smallest_normal  # no subnormals
        return 2.0 ** (1 - self.bias - self.man_bits)

    @property
    def eps(self) -> float:
        """Spacing near 1: the gap between 1 and the next representable number."""
        return 2.0**-self.man_bits

    @property
    def unit_roundoff(self) -> float:
        """The largest relative error of rounding to nearest (half the spacing): 2^−(m+1)."""
        return self.eps / 2

    @property
    def binades(self) -> float:
        """Powers of two from the smallest subnormal to the largest value: the format's dynamic range."""
        return math.log2(self.max / self.smallest_subnormal)

    @property
    def normal_binades(self) -> float:
        return math.log2(self.max / self.smallest_normal)

    @property
    def has_inf(self) -> bool:
        return self.kind == "ieee"

    def describe(self) -> str:
        """'fp8 E4M3: range 17.8 powers of two (subnormals included), rounding error at most 2^-4 = 6.25 % of a value'."""
        from perflab.core.readout import num, percent

        return (f"{self.label}: range {num(self.binades)} powers of two (subnormals included), rounding error at most "
                f"2^{int(math.log2(self.unit_roundoff))} = {percent(self.unit_roundoff)} of a value")

    def torch_dtype(self):
        """The torch dtype, or None (TF32)."""
        if self.torch_name is None:
            return None
        import torch

        return getattr(torch, self.torch_name, None)


FP32 = FloatFormat("fp32", "fp32 (IEEE binary32)", 8, 23, "ieee", "float32")
TF32 = FloatFormat("tf32", "TF32 (Tensor Core math mode)", 8, 10, "ieee", None)
BF16 = FloatFormat("bf16", "bf16 (bfloat16)", 8, 7, "ieee", "bfloat16")
FP16 = FloatFormat("fp16", "fp16 (IEEE binary16)", 5, 10, "ieee", "float16")
E4M3 = FloatFormat("e4m3", "fp8 E4M3", 4, 3, "fn", "float8_e4m3fn")
E5M2 = FloatFormat("e5m2", "fp8 E5M2", 5, 2, "ieee", "float8_e5m2")
E8M0 = FloatFormat("e8m0", "E8M0 (MX block scale)", 8, 0, "e8m0", "float8_e8m0fnu")

FORMATS: tuple[FloatFormat, ...] = (FP32, TF32, BF16, FP16, E4M3, E5M2)  # the numbers you train in
ALL = FORMATS + (E8M0,)


def by_name(name: str) -> FloatFormat:
    """The format called `name` ('bf16', 'e4m3', 'fp8 e5m2', 'float8_e4m3fn', ...); InputError lists them."""
    key = str(name).strip().lower().removeprefix("torch.").replace("fp8 ", "").replace("fp8_", "")
    for f in ALL:
        if key in (f.name, f.torch_name):
            return f
    raise InputError(f"unknown format {name!r}: use one of {', '.join(f.name for f in ALL)}")


@dataclass(frozen=True)
class MXFormat:
    """An MX block format: `block` elements of `element` sharing one `scale` (OCP Microscaling v1.0, §5)."""

    element: FloatFormat = E4M3
    block: int = 32
    scale: FloatFormat = E8M0

    @property
    def bits_per_element(self) -> float:
        return self.element.bits + self.scale.bits / self.block

    @property
    def name(self) -> str:
        return f"MX{self.element.label.split()[0].upper()} ({self.element.name}, {self.block}-element blocks, {self.scale.name} scale)"


MXFP8 = MXFormat()


def finfo_check(fmt: FloatFormat) -> dict[str, tuple[float, float]] | None:
    """{figure: (from the layout, from torch.finfo)} for a format torch has; None for TF32."""
    dt = fmt.torch_dtype()
    if dt is None:
        return None
    import torch

    fi = torch.finfo(dt)
    return {"bits": (float(fmt.bits), float(fi.bits)), "max": (fmt.max, float(fi.max)),
            "smallest normal": (fmt.smallest_normal, float(fi.smallest_normal)), "eps": (fmt.eps, float(fi.eps))}


def _pow2(x: float) -> str:
    """'2^-9 = 0.00195' for a power of two, the number alone otherwise."""
    from perflab.core.readout import num

    e = math.log2(x)
    if e == int(e):
        return f"2^{int(e)} = {num(x)}"
    return num(x)


@dataclass(frozen=True)
class FormatTable:
    """Lesson 16's first table: each format's layout and what it can hold."""

    formats: tuple[FloatFormat, ...] = FORMATS

    def agrees_with_torch(self, fmt: FloatFormat) -> bool | None:
        chk = finfo_check(fmt)
        return None if chk is None else all(a == b for a, b in chk.values())

    def table(self):
        import pandas as pd

        from perflab.core.readout import num

        rows = []
        for f in self.formats:
            agree = self.agrees_with_torch(f)
            rows.append({"format": f.label, "bits (sign-exponent-mantissa)": f.layout,
                         "largest": num(f.max), "smallest normal": _pow2(f.smallest_normal),
                         "smallest subnormal": _pow2(f.smallest_subnormal), "spacing near 1": _pow2(f.eps),
                         "range (powers of two)": num(f.binades),
                         "torch.finfo agrees": "no torch dtype" if agree is None else ("yes" if agree else "NO")})
        return pd.DataFrame(rows).set_index("format")
