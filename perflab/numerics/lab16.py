"""Checks for labs/16_fp8_rowwise.ipynb: a rowwise fp8 quantizer, its inverse, and an fp8 linear layer.

The learner writes three functions in plain PyTorch:

* `quantize_rowwise(x, fp8_dtype)` → (q, scale): one scale per row of the 2-D tensor x from the row's
  largest finite |x| (its amax), so that the amax lands on the format's largest value; q = x scaled,
  saturated to ±max (±inf too) and cast to `fp8_dtype` (torch.float8_e4m3fn or torch.float8_e5m2). An
  all-zero row, a row of fp32 denormals, and a row holding inf or NaN must all come out without NaN
  where the input had none (an amax floor, amax over the finite values); a NaN stays NaN;
* `dequantize_rowwise(q, scale)` → x̂ in fp32, the inverse (the check hands it q's fp8 values widened to
  fp32, since torch cannot send a float8 tensor to the grader's answer process; `q.float()` reads both);
* `fp8_linear(x, w)` → y ≈ x·wᵀ: x per token and w per output channel quantized for the forward, the
  product of the rounded values taken in fp32 and scaled back.

Graded against error bounds, not against one right answer (any floor up to 1e-12, a power-of-two scale,
either scale convention pass). For a finite x in a row whose amax is A (at least `AMAX_FLOOR`), with
s = max ÷ A: |x̂ − x| ≤ max(u·|x|, smallest subnormal ÷ s), u = 2^−(m+1) the format's unit roundoff,
which is what rounding x·s to the nearest fp8 value guarantees (twice its subnormal half-spacing, so
that a power-of-two scale passes too). ±inf must come back finite, with its sign, at the top of its row's
range; NaN must come back NaN. `fp8_linear`'s worst per-row relative error must stay within 1.4× what a
rowwise E4M3 forward makes, and above half of it (a product taken without fp8 is not an fp8 layer).

Plausible wrong answers, each named by a targeted probe before the hidden tensors run (the mutants of
tests/labs/test_lab16.py): one scale for the whole tensor (tensorwise where rowwise is asked); no
saturation (an inf becomes inf in E5M2, NaN in older torch's E4M3); a scale from the mean |x| instead
of the amax; E5M2 in the forward. And the edges: no amax floor (an all-zero row gives 0 ÷ 0), an amax
that lets inf or NaN in, a NaN replaced by a number, q in the wrong dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from perflab.grading.checks import NOT_DONE, attempt, fail, record
from perflab.numerics import parity as _parity
from perflab.numerics import scaling as _scaling
from perflab.numerics.formats import E4M3, E5M2, FloatFormat, by_name
from perflab.numerics.scaling import AMAX_FLOOR, quantize

NAME = "rowwise fp8"
LINEAR = "fp8 linear"
LINEAR_SLACK = 1.4  # fp8_linear's worst row error may be this many times a rowwise E4M3 forward's

HINTS = {
    "tensorwise": ("every row got the same scale (tensorwise scaling), so a row of small values next to a row of "
                   "large ones is scaled for the large one and loses its digits: compute the amax per row "
                   "(amax over dim=-1, keepdim=True) and one scale per row"),
    "saturation": ("an inf (or a value past the format's largest) came back as inf or NaN: saturate before the "
                   "cast, clamp(x·scale, -max, max), as torchao's casts do (E5M2 keeps inf, and E4M3 has no inf at "
                   "all: an overflowing cast gives NaN or inf depending on the torch version)"),
    "mean": ("your scale comes from the mean |x| of the row, not from its largest |x|: every value above the mean "
             "lands past the format's largest value and saturates. Scale so that the row's amax lands on the "
             "format's max: scale = max / amax"),
    "e5m2 forward": ("fp8_linear's error is that of E5M2: the forward's activations and weights need precision "
                     "(E4M3's 3 mantissa bits round half as coarsely as E5M2's 2); E5M2's range is for gradients"),
    "zero row": ("an all-zero row came back NaN: its amax is 0, so max / amax is inf and 0·inf is NaN. Give the amax a "
                 f"floor (torchao clamps it at {AMAX_FLOOR:g}) so that the scale stays finite"),
    "denormal row": ("a row of fp32 denormals (|x| ≈ 1e-40) came back NaN or wrong: max / amax overflows fp32 to inf. "
                     f"Clamp the amax from below (at {AMAX_FLOOR:g}, torchao's floor) before dividing"),
    "nonfinite amax": ("a single inf or NaN in a row spoilt the whole row: the amax must come from the finite values "
                       "only (set inf and NaN aside, e.g. torch.where(torch.isfinite(x), x.abs(), 0)); the inf then "
                       "saturates and the NaN stays NaN"),
    "nan kept": "a NaN in the input must stay NaN in x̂ (it marks a bug upstream): do not replace it by a number",
    "dtype": "q must be in the fp8 dtype asked for (fp8_dtype): cast the saturated x·scale with .to(fp8_dtype)",
    "exact": ("fp8_linear's product is more exact than fp8 allows: quantize x (per token) and w (per output channel) "
              "with quantize_rowwise, multiply q's in fp32 and scale back"),
}


# ---------------------------------------------------------------- the reference (what the bounds are computed from)


def reference(x: torch.Tensor, fp8_dtype) -> torch.Tensor:
    """x̂ of a rowwise amax-scaled, saturating quantizer (perflab.numerics.scaling.quantize), in x's 2-D shape."""
    return quantize(x, "row", _fmt(fp8_dtype))[0]


def _fmt(fp8_dtype) -> FloatFormat:
    return by_name(str(fp8_dtype))


def row_amax(x: torch.Tensor) -> torch.Tensor:
    """Each row's largest finite |x|, at least AMAX_FLOOR (rows × 1)."""
    a = torch.where(torch.isfinite(x), x.abs(), torch.zeros((), dtype=torch.float32))
    return a.amax(dim=-1, keepdim=True).clamp(min=AMAX_FLOOR)


def bound(x: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """The largest |x̂ − x| each finite element may have (module docstring)."""
    s = fmt.max / row_amax(x)
    return torch.maximum(fmt.unit_roundoff * x.abs(), fmt.smallest_subnormal / s) * (1 + 1e-3) + 1e-45


def reference_linear(x: torch.Tensor, w: torch.Tensor, fmt: FloatFormat = E4M3) -> torch.Tensor:
    """x·wᵀ with x and w rounded rowwise to `fmt` (fp32 product)."""
    return quantize(x, "row", fmt)[0] @ quantize(w, "row", fmt)[0].t()


def row_errors(y: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """Per-row relative error ‖y_r − exact_r‖ / ‖exact_r‖."""
    return torch.linalg.vector_norm((y - exact).double(), dim=-1) / torch.linalg.vector_norm(exact.double(), dim=-1)


# ---------------------------------------------------------------- inputs


def make_case(case: dict[str, Any]) -> torch.Tensor:
    """A hidden tensor: rows of magnitudes 10^lo … 10^hi, with the case's special rows and elements."""
    g = torch.Generator().manual_seed(int(case["seed"]))
    rows, cols = int(case["rows"]), int(case["cols"])
    mags = 10 ** (case["lo"] + (case["hi"] - case["lo"]) * torch.rand(rows, 1, generator=g, dtype=torch.float64))
    x = (torch.randn(rows, cols, generator=g, dtype=torch.float64) * mags).float()
    for c in case.get("outlier_cols", ()):
        x[:, c % cols] *= float(case.get("outlier", 100.0))
    for r in case.get("zero_rows", ()):
        x[r % rows] = 0
    for r in case.get("denormal_rows", ()):
        x[r % rows] = torch.randn(cols, generator=g) * 1e-40
        x[r % rows, ::3] = 0
    for r, c, v in case.get("specials", ()):
        x[r % rows, c % cols] = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[v]
    return x


CASES: list[dict[str, Any]] = [
    dict(rows=16, cols=64, lo=-3, hi=3, dtype="e4m3", seed=1),
    dict(rows=12, cols=96, lo=-1, hi=1, dtype="e4m3", seed=2, outlier_cols=(5, 40), outlier=1000.0),
    dict(rows=10, cols=48, lo=-6, hi=4, dtype="e5m2", seed=3, zero_rows=(2,), denormal_rows=(7,)),
    dict(rows=9, cols=33, lo=-2, hi=2, dtype="e4m3", seed=4, specials=((1, 3, "inf"), (4, 0, "-inf"), (6, 9, "nan"))),
    dict(rows=8, cols=40, lo=0, hi=2, dtype="e5m2", seed=5, specials=((0, 1, "inf"), (3, 5, "nan")), zero_rows=(5,)),
]
VISIBLE: dict[str, Any] = dict(rows=4, cols=32, lo=-2, hi=2, dtype="e4m3", seed=0, zero_rows=(3,))


def _dtype(name: str):
    return _fmt(name).torch_dtype()


# ---------------------------------------------------------------- grading one quantizer


class _NotDone(Exception):
    """A learner's function is still the stub (its "not done yet" line is printed)."""


def _roundtrip(quantize_rowwise, dequantize_rowwise, x: torch.Tensor, dtype_name: str,
               what: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, scale, x̂) from the learner's pair, with the structural checks; _NotDone for a stub."""
    dt = _dtype(dtype_name)
    got = attempt(NAME, quantize_rowwise, x.clone(), dt, what=what)
    if got is NOT_DONE:
        raise _NotDone
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        raise fail(NAME, "quantize_rowwise must return (q, scale)")
    q, scale = got
    if not isinstance(q, torch.Tensor) or q.dtype != dt:
        raise fail(NAME, f"for {what} q is {getattr(q, 'dtype', type(q).__name__)}, expected {dt}. Hint: {HINTS['dtype']}")
    # q's values widened to fp32: an fp8 tensor cannot be sent to the grader's answer process (this torch
    # does not unpickle float8 storage), and `q.float() / scale` reads both alike
    back = attempt(NAME, dequantize_rowwise, q.float(), scale, what=what)
    if back is NOT_DONE:
        raise _NotDone
    if not isinstance(back, torch.Tensor) or back.numel() != x.numel():
        raise fail(NAME, f"dequantize_rowwise must return a tensor of x's {x.numel()} values")
    return q, torch.as_tensor(scale), back.float().reshape(x.shape)


def violations(x: torch.Tensor, back: torch.Tensor, fmt: FloatFormat) -> dict[str, int]:
    """How many elements break each rule (module docstring), by kind."""
    fin = torch.isfinite(x)
    amax = row_amax(x).expand_as(x)
    err_ok = (back - x).abs() <= bound(x, fmt)
    inf = torch.isinf(x)
    inf_ok = torch.isfinite(back) & (torch.sign(back) == torch.sign(x)) & (back.abs() >= (1 - 2 * fmt.unit_roundoff) * amax)
    return {"finite": int((fin & ~(err_ok & torch.isfinite(back))).sum()), "inf": int((inf & ~inf_ok).sum()),
            "nan": int((torch.isnan(x) & ~torch.isnan(back)).sum()),
            "new nan": int((fin & torch.isnan(back)).sum())}


def _probe(quantize_rowwise, dequantize_rowwise) -> str | None:
    """Targeted inputs, each of which one mistake fails: the hint for the first that fails."""
    # tensorwise: a row of thousands over a row of thousandths
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2, 64, generator=g)
    x[0] *= 1000
    x[1] *= 1e-3
    q, scale, back = _roundtrip(quantize_rowwise, dequantize_rowwise, x, "e4m3", "two rows, 1000 and 0.001")
    s = scale.float().reshape(-1)
    if violations(x, back, E4M3)["finite"]:
        if s.numel() == 1 or bool(torch.allclose(s, s[:1].expand_as(s))):
            return HINTS["tensorwise"]
        if (back - x).abs()[0].argmax() == x[0].abs().argmax():
            return HINTS["mean"]
    # the mean: one large value among small ones in a row
    x = torch.ones(1, 32)
    x[0, 7] = 100.0
    _, _, back = _roundtrip(quantize_rowwise, dequantize_rowwise, x, "e4m3", "a row of ones and one 100")
    if violations(x, back, E4M3)["finite"] and float(back[0, 7]) < 99:
        return HINTS["mean"]
    # an all-zero row, a row of denormals
    z = torch.zeros(2, 16)
    _, _, back = _roundtrip(quantize_rowwise, dequantize_rowwise, z, "e4m3", "an all-zero row")
    if not torch.isfinite(back).all() or (back != 0).any():
        return HINTS["zero row"]
    d = torch.full((1, 16), 3e-40)
    d[0, ::2] = 0
    _, _, back = _roundtrip(quantize_rowwise, dequantize_rowwise, d, "e4m3", "a row of fp32 denormals")
    if sum(violations(d, back, E4M3).values()):
        return HINTS["denormal row"]
    # inf and NaN among finite values, in the format that has inf
    x = torch.linspace(-3, 3, 16).reshape(1, 16)
    x[0, 2], x[0, 9] = math.inf, math.nan
    _, _, back = _roundtrip(quantize_rowwise, dequantize_rowwise, x, "e5m2", "a row holding inf and NaN")
    v = violations(x, back, E5M2)
    if v["finite"] or v["new nan"]:
        return HINTS["nonfinite amax"]
    if v["inf"]:
        return HINTS["saturation"]
    if v["nan"]:
        return HINTS["nan kept"]
    return None


def check_quantizer(quantize_rowwise: Callable[..., Any], dequantize_rowwise: Callable[..., Any],
                    cases: list[dict[str, Any]] | None = None):
    """The learner's pair on the probes, then on the hidden tensors (`cases`, default CASES): each element
    within its bound, inf saturated, NaN kept. Raises LabCheckError with a hint when wrong."""
    try:
        _roundtrip(quantize_rowwise, dequantize_rowwise, make_case(VISIBLE), VISIBLE["dtype"], "the visible tensor")
        hint = _probe(quantize_rowwise, dequantize_rowwise)
        if hint:
            raise fail(NAME, hint)
        cases = CASES if cases is None else cases
        for case in cases:
            x = make_case(case)
            back = _roundtrip(quantize_rowwise, dequantize_rowwise, x, case["dtype"], "a hidden tensor")[2]
            bad = {k: v for k, v in violations(x, back, _fmt(case["dtype"])).items() if v}
            if bad:
                what = ", ".join(f"{v} {k}" for k, v in bad.items())
                raise fail(NAME, f"on a hidden {case['rows']}×{case['cols']} tensor in {case['dtype']} (rows from "
                                 f"1e{case['lo']} to 1e{case['hi']}), elements out of bounds: {what}. Hint: each element "
                                 "must come back within max(u·|x|, smallest subnormal ÷ scale) of itself, with the row's "
                                 "own scale from its finite amax")
    except _NotDone:
        return record(NAME, False)
    print(f"✓ {NAME}: every element within fp8's bound on {len(cases)} hidden tensors (zero, denormal, inf and NaN rows)")
    return record(NAME, True)


# ---------------------------------------------------------------- grading the linear layer


def linear_case(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x (tokens with magnitudes over six powers of ten) and w (output channels of two magnitudes)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(48, 256, generator=g) * 10 ** torch.linspace(-3, 3, 48).reshape(48, 1)
    w = torch.randn(96, 256, generator=g) * 0.02
    w[::2] *= 50
    return x, w


def check_linear(fp8_linear: Callable[..., Any], random_seeds: tuple[int, ...] = (21, 22)):
    """`fp8_linear(x, w)`: its worst row error against x·wᵀ between half and LINEAR_SLACK× a rowwise E4M3
    forward's."""
    for s in random_seeds:
        x, w = linear_case(s)
        y = attempt(LINEAR, fp8_linear, x.clone(), w.clone(), what="x, w")
        if y is NOT_DONE:
            return record(LINEAR, False)
        if not isinstance(y, torch.Tensor) or tuple(y.shape) != (x.shape[0], w.shape[0]):
            raise fail(LINEAR, f"fp8_linear(x, w) must return x·wᵀ's shape {(x.shape[0], w.shape[0])}")
        exact = x.double() @ w.double().t()
        mine = float(row_errors(y.double(), exact).max())
        e4 = float(row_errors(reference_linear(x, w, E4M3).double(), exact).max())
        e5 = float(row_errors(reference_linear(x, w, E5M2).double(), exact).max())
        if not math.isfinite(mine) or mine > LINEAR_SLACK * e4:
            hint = HINTS["e5m2 forward"] if math.isfinite(mine) and abs(mine - e5) < abs(mine - e4) and mine < 2 * e5 else (
                HINTS["tensorwise"] if math.isfinite(mine) else "NaN or inf in y")
            raise fail(LINEAR, f"the worst row of y is {mine:.3g} off x·wᵀ (relative), a rowwise E4M3 forward is {e4:.3g} "
                               f"off (allowed {LINEAR_SLACK}× that). Hint: {hint}")
        if mine < 0.5 * e4:
            raise fail(LINEAR, f"the worst row of y is {mine:.3g} off x·wᵀ, less than half of fp8's own {e4:.3g}. "
                               f"Hint: {HINTS['exact']}")
    print(f"✓ {LINEAR}: within fp8 E4M3's error on {len(random_seeds)} hidden layers")
    return record(LINEAR, True)


def check_rowwise(quantize_rowwise, dequantize_rowwise, fp8_linear, cases: list[dict[str, Any]] | None = None,
                  random_seeds: tuple[int, ...] = (21, 22)):
    """Both checks; raises LabCheckError on the first wrong answer."""
    ok = check_quantizer(quantize_rowwise, dequantize_rowwise, cases)
    return check_linear(fp8_linear, random_seeds) if ok else ok


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
LEARNER_ANSWERS = ("quantize_rowwise", "dequantize_rowwise", "fp8_linear")
REFERENCES = {"rowwise": reference, "linear": reference_linear}
FORBIDDEN = (reference, reference_linear, row_amax, _scaling, _parity)  # the modules: every quantizer perflab has


def grading_inputs(rng) -> dict[str, Any]:
    """Tensors drawn per learner (none of them in the lab): shapes, magnitudes, which rows are zero or
    denormal, where the inf and NaN go, and the linear layers' random seeds."""
    cases = []
    for i in range(4):
        rows, cols = rng.randint(3, 40), rng.randint(16, 300)
        lo = rng.randint(-8, 2)
        case: dict[str, Any] = dict(rows=rows, cols=cols, lo=lo, hi=lo + rng.randint(1, 8), dtype=rng.choice(("e4m3", "e5m2")),
                    seed=rng.randint(10, 10**6), zero_rows=(rng.randrange(rows),), denormal_rows=(rng.randrange(rows),),
                    outlier_cols=(rng.randrange(cols),), outlier=10 ** rng.uniform(1, 4))
        if i % 2:
            case["specials"] = ((rng.randrange(rows), rng.randrange(cols), "inf"),
                                (rng.randrange(rows), rng.randrange(cols), "-inf"),
                                (rng.randrange(rows), rng.randrange(cols), "nan"))
        cases.append(case)
    return {"cases": cases, "random_seeds": (rng.randint(100, 10**6), rng.randint(100, 10**6))}


def judge(answers, rng) -> None:
    drawn = grading_inputs(rng)
    check_rowwise(answers["quantize_rowwise"], answers["dequantize_rowwise"], answers["fp8_linear"],
                  CASES + drawn["cases"], (21,) + tuple(drawn["random_seeds"]))

