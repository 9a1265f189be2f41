"""GEMM shapes: tile and wave quantization, arithmetic intensity, Tensor Core alignment, sizing.

How a GPU runs C[m×n] = A[m×k] · B[k×n] (NVIDIA, "Matrix Multiplication Background User's Guide",
DU-09799-001, ch. 2–3, https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/):

* The output C is cut into tiles of tile_m × tile_n; each tile is one thread block, which steps
  through all of k. So there are  tiles = ⌈m / tile_m⌉ · ⌈n / tile_n⌉  blocks, each doing the
  same work, even the ragged ones at the edges (**tile quantization**).
* The GPU runs `sms × blocks_per_sm` blocks at once (a **wave**; A100: 108 SMs, one 256×128
  block per SM, so 108 tiles per wave). The blocks need  waves = ⌈tiles / wave_size⌉  rounds, and
  a last wave that is nearly empty costs almost as long as a full one (**wave quantization**).
* So the fraction of the machine doing useful work is
      utilization = (m · n) / (waves · wave_size · tile_m · tile_n)
                  = tile_utilization · wave_utilization, with
      tile_utilization = m·n / (tiles · tile_m · tile_n)   (useful share of the computed outputs)
      wave_utilization = tiles / (waves · wave_size)         (busy share of the SM slots)
  and a compute-bound GEMM is predicted to run at peak × utilization, its time a staircase in
  the number of waves.

Everything here is arithmetic: no torch, no device. `sweep_dimension` (which measures) imports
perflab.core.measure lazily.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from perflab.core.errors import InputError
from perflab.core.validate import positive_int

# Thread-block tile shapes (tile_m × tile_n) that cuBLAS kernels use; the guide's §2.3 lists
# 256×128, 128×256, 128×128, 256×64, 64×256, 128×64, 64×128 and 64×64 (from most to least efficient).
TILE_SHAPES: tuple[tuple[int, int], ...] = (
    (256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64), (64, 128), (64, 64),
)
# Blocks to try when fitting a CPU's steps: CPU BLAS kernels work on register blocks of a few
# vectors (16 fp32 values per AVX-512 register) inside cache blocks of a few hundred.
CPU_BLOCKS: tuple[tuple[int, int], ...] = (
    (8, 8), (16, 16), (32, 32), (64, 64), (128, 128), (16, 64), (64, 16), (32, 128), (128, 32),
)


def parse_tile(text: str | Sequence[int]) -> tuple[int, int]:
    """'256x128' (or '256×128', '256,128', (256, 128)) as (tile_m, tile_n)."""
    if isinstance(text, (tuple, list)):
        parts = list(text)
    else:
        parts = [p for p in re.split(r"\s*[x×X*,]\s*", str(text).strip()) if p]
    if len(parts) != 2:
        raise InputError(f"tile {text!r} should look like 256x128 (rows × columns of one output tile)")
    try:
        tm, tn = (int(p) for p in parts)
    except (TypeError, ValueError):
        raise InputError(f"tile {text!r} should be two whole numbers, e.g. 256x128") from None
    return positive_int("tile rows", tm), positive_int("tile columns", tn)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def tile_count(m: int, n: int, tile_m: int, tile_n: int) -> int:
    """Thread blocks (tiles) covering an m×n output: ⌈m/tile_m⌉ · ⌈n/tile_n⌉."""
    return ceil_div(positive_int("m", m), positive_int("tile rows", tile_m)) * \
        ceil_div(positive_int("n", n), positive_int("tile columns", tile_n))


def wave_count(tiles: int, sms: int, blocks_per_sm: int = 1) -> int:
    """Rounds needed to run `tiles` blocks on `sms` SMs holding `blocks_per_sm` each: ⌈tiles / (sms·blocks)⌉."""
    return ceil_div(positive_int("tiles", tiles), positive_int("sms", sms) * positive_int("blocks per SM", blocks_per_sm))


@dataclass(frozen=True)
class WavePrediction:
    """The tile/wave model of one GEMM. Fractions are 0..1; counts are whole numbers."""

    m: int
    n: int
    k: int
    tile_m: int
    tile_n: int
    sms: int
    blocks_per_sm: int
    tiles_m: int
    tiles_n: int
    tiles: int
    wave_size: int  # blocks running at once: sms × blocks_per_sm
    waves: int
    last_wave_tiles: int  # blocks in the last (tail) wave
    tile_utilization: float  # m·n / (tiles · tile_m · tile_n)
    wave_utilization: float  # tiles / (waves · wave_size)
    utilization: float  # the product: useful share of the machine
    arithmetic_intensity: float | None = None  # FLOPs per byte (with `itemsize`), None when not asked
    itemsize: int | None = None

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flops"] = self.flops
        return d

    def describe(self) -> str:
        return (f"{self.m}×{self.n}×{self.k} with {self.tile_m}×{self.tile_n} tiles on {self.sms} SMs"
                f"{'' if self.blocks_per_sm == 1 else f' × {self.blocks_per_sm} blocks'}: "
                f"{self.tiles_m}·{self.tiles_n} = {self.tiles} tiles → {self.waves} wave(s) of {self.wave_size} "
                f"(last wave {self.last_wave_tiles}/{self.wave_size}); utilization {self.utilization:.1%} "
                f"(tiles {self.tile_utilization:.1%} × waves {self.wave_utilization:.1%})")


def wave_model(m: int, n: int, k: int = 1, *, sms: int, tile: str | Sequence[int] = (256, 128),
               blocks_per_sm: int = 1, itemsize: int | None = None) -> WavePrediction:
    """Tiles, waves and utilization of an m×k by k×n GEMM (see the module docstring)."""
    m, n, k = positive_int("m", m), positive_int("n", n), positive_int("k", k)
    sms = positive_int("sms", sms, maximum=100_000)
    tm, tn = parse_tile(tile)
    bps = positive_int("blocks per SM", blocks_per_sm, maximum=64)
    tiles_m, tiles_n = ceil_div(m, tm), ceil_div(n, tn)
    tiles = tiles_m * tiles_n
    wave_size = sms * bps
    waves = ceil_div(tiles, wave_size)
    tile_u = (m * n) / (tiles * tm * tn)
    wave_u = tiles / (waves * wave_size)
    ai = None
    if itemsize is not None:
        from perflab.core.roofline import matmul_intensity

        ai = matmul_intensity(m, n, k, itemsize)
    return WavePrediction(m, n, k, tm, tn, sms, bps, tiles_m, tiles_n, tiles, wave_size, waves,
                          tiles - (waves - 1) * wave_size, tile_u, wave_u, tile_u * wave_u, ai, itemsize)


def predicted_time_s(m: int, n: int, k: int, *, sms: int, tile=(256, 128), peak_tflops: float,
                     blocks_per_sm: int = 1, bandwidth_gbps: float | None = None, itemsize: int = 2) -> float:
    """Seconds the model predicts for one GEMM.

    Compute: every wave takes as long as one block's work at the per-slot share of the peak,
        t_compute = waves · (2 · tile_m · tile_n · k) / (peak / wave_size) = 2·m·n·k / (peak · utilization).
    Memory (when a bandwidth is given): the fewest bytes a GEMM moves, (mk + kn + mn) · itemsize,
    at that bandwidth. The prediction is the larger of the two (the roofline).
    """
    if not peak_tflops or peak_tflops <= 0:
        raise InputError("a predicted time needs a peak TFLOP/s > 0 (this device's peak is unknown: pass one)")
    w = wave_model(m, n, k, sms=sms, tile=tile, blocks_per_sm=blocks_per_sm)
    t = w.flops / (peak_tflops * 1e12 * w.utilization)
    if bandwidth_gbps:
        from perflab.core.roofline import matmul_bytes

        t = max(t, matmul_bytes(w.m, w.n, w.k, itemsize) / (bandwidth_gbps * 1e9))
    return t


def predicted_tflops(m: int, n: int, k: int, **kw) -> float:
    """TFLOP/s the model predicts: 2·m·n·k / `predicted_time_s`."""
    return 2 * m * n * k / predicted_time_s(m, n, k, **kw) / 1e12


DIMS = ("m", "n", "k")


def _shape(dim: str, value: int, fixed: dict[str, int]) -> tuple[int, int, int]:
    if dim not in DIMS:
        raise InputError(f"dimension {dim!r}: use m, n or k")
    s = {**fixed, dim: value}
    missing = [d for d in DIMS if d not in s]
    if missing:
        raise InputError(f"give the fixed sizes {', '.join(missing)} for a sweep over {dim}")
    return int(s["m"]), int(s["n"]), int(s["k"])


def staircase(dim: str, values: Iterable[int], fixed: dict[str, int], *, sms: int, tile=(256, 128),
              blocks_per_sm: int = 1, peak_tflops: float | None = None, bandwidth_gbps: float | None = None,
              itemsize: int = 2):
    """The model along one dimension: a DataFrame with m, n, k, tiles, waves, utilization per value,
    plus predicted_time_s and predicted_tflops when a peak is given."""
    import pandas as pd

    rows = []
    for v in values:
        m, n, k = _shape(dim, int(v), fixed)
        w = wave_model(m, n, k, sms=sms, tile=tile, blocks_per_sm=blocks_per_sm)
        row = {"m": m, "n": n, "k": k, dim: int(v), "tiles": w.tiles, "waves": w.waves,
               "tile_utilization": w.tile_utilization, "wave_utilization": w.wave_utilization,
               "utilization": w.utilization}
        if peak_tflops:
            t = predicted_time_s(m, n, k, sms=sms, tile=tile, blocks_per_sm=blocks_per_sm, peak_tflops=peak_tflops,
                                 bandwidth_gbps=bandwidth_gbps, itemsize=itemsize)
            row.update(predicted_time_s=t, predicted_tflops=w.flops / t / 1e12)
        rows.append(row)
    return pd.DataFrame(rows)


def cliffs(dim: str, values: Iterable[int], fixed: dict[str, int], *, sms: int, tile=(256, 128),
           blocks_per_sm: int = 1) -> list[int]:
    """The values along `dim` where one more wave is needed (the first value of each new wave).

    Throughput drops there: the new wave starts almost empty.
    """
    out, prev = [], None
    for v in sorted(int(x) for x in values):
        m, n, k = _shape(dim, v, fixed)
        w = wave_count(tile_count(m, n, *parse_tile(tile)), sms, blocks_per_sm)
        if prev is not None and w > prev:
            out.append(v)
        prev = w
    return out


def full_wave_sizes(dim: str, fixed: dict[str, int], *, sms: int, tile=(256, 128), blocks_per_sm: int = 1,
                    limit: int = 10**6) -> list[int]:
    """Sizes along `dim` (multiples of the tile) whose tile count is an exact multiple of the wave size."""
    tm, tn = parse_tile(tile)
    step = {"m": tm, "n": tn}.get(dim)
    if step is None:
        raise InputError("full waves are about the output's rows (m) or columns (n), not k")
    out = []
    v = step
    while v <= limit:
        m, n, k = _shape(dim, v, fixed)
        if tile_count(m, n, tm, tn) % (sms * blocks_per_sm) == 0:
            out.append(v)
        v += step
    return out


# ---------------------------------------------------------------- roofline per dtype

def roofline_bound(m: int, n: int, k: int, dtype: str, spec) -> dict[str, Any]:
    """Where a GEMM sits on chip `spec`'s roofline for `dtype`.

    intensity = 2mnk / ((mk + kn + mn) · itemsize) FLOPs per byte; ridge = peak / bandwidth;
    attainable = min(peak, intensity × bandwidth). `spec` is a perflab.core.hardware.AcceleratorSpec.
    """
    from perflab.core.dtypes import parse_dtype
    from perflab.core.roofline import matmul_intensity

    dt = parse_dtype(dtype)
    itemsize = dt.itemsize if dt.name != "tf32" else 4
    ai = matmul_intensity(m, n, k, itemsize)
    peak = spec.peak(dt.name) if spec is not None else None
    bw = spec.memory_bandwidth_gbps if spec is not None else None
    out: dict[str, Any] = {"dtype": dt.name, "itemsize": itemsize, "arithmetic_intensity": ai, "peak_tflops": peak,
                           "bandwidth_gbps": bw, "ridge": None, "bound": None, "attainable_tflops": None}
    if peak and bw:
        ridge = peak * 1e12 / (bw * 1e9)
        out.update(ridge=ridge, bound="memory-bound" if ai < ridge else "compute-bound",
                   attainable_tflops=min(peak, ai * bw * 1e9 / 1e12))
    return out


# ---------------------------------------------------------------- Tensor Core alignment

ARCHS = {
    # compute capability (major, minor) prefix -> architecture name
    "volta": ((7, 0),), "turing": ((7, 5),), "ampere": ((8, 0), (8, 6), (8, 7)), "ada": ((8, 9),),
    "hopper": ((9, 0),), "blackwell": ((10, 0), (10, 1), (10, 3), (12, 0), (12, 1)),
}
_ARCH_OF_SPEC = (  # perflab.core.hardware ids -> architecture (by the id's prefix)
    ("v100", "volta", "7.0"), ("a100", "ampere", "8.0"), ("a10", "ampere", "8.6"), ("rtx-3090", "ampere", "8.6"),
    ("l4", "ada", "8.9"), ("l40s", "ada", "8.9"), ("rtx-4090", "ada", "8.9"), ("h100", "hopper", "9.0"),
    ("h200", "hopper", "9.0"), ("gh200", "hopper", "9.0"), ("b200", "blackwell", "10.0"), ("mi300x", "cdna3", None),
)

ALIGNMENT_SOURCE = ("NVIDIA Matrix Multiplication Background User's Guide (DU-09799-001), §2.2 Tensor Core "
                    "Requirements: dimensions in multiples of 16 bytes, 128 bytes on A100; restated in "
                    "Anthony et al., 'The Case for Co-Designing Model Architectures with Hardware' (arXiv:2401.14489), "
                    "§ on tile quantization: 8 and 64 fp16 elements on V100 and A100")


def arch_of(device: str) -> tuple[str, str | None]:
    """(architecture, compute capability) for a hardware-table id ('a100-sxm-80gb'), a torch device
    name ('NVIDIA H100 80GB HBM3'), an architecture name ('hopper') or a capability ('8.0').
    'cpu' gives ('cpu', None); an unknown name raises InputError."""
    key = str(device).strip().lower()
    if key in ARCHS:
        return key, "{}.{}".format(*ARCHS[key][0])
    if key in {"cpu", "mps"}:
        return key, None
    if re.fullmatch(r"\d+\.\d+", key):
        major, minor = (int(x) for x in key.split("."))
        for name, ccs in ARCHS.items():
            if (major, minor) in ccs:
                return name, key
        if major >= 10:
            return "blackwell", key
        raise InputError(f"compute capability {key} predates Tensor Cores (need 7.0+)")
    from perflab.core.hardware import lookup

    spec = lookup(device)
    if spec is not None:
        key = spec.id
    for prefix, arch, cc in _ARCH_OF_SPEC:
        if key.startswith(prefix):
            return arch, cc
    raise InputError(f"unknown GPU {device!r}: give an id from perflab's table (e.g. a100-sxm-80gb, h100-sxm), "
                     "an architecture (volta, ampere, hopper, ...) or a compute capability like 8.0")


@dataclass(frozen=True)
class AlignmentRule:
    """Multiples (in elements) that let Tensor Cores run a GEMM in `dtype` on `arch` at full speed."""

    dtype: str
    arch: str
    itemsize: int
    required_bytes: int | None  # below this, old cuBLAS/cuDNN (and fp8 _scaled_mm) refuse Tensor Cores
    recommended_bytes: int | None  # the multiple that runs best
    note: str

    @property
    def required(self) -> int | None:
        return None if self.required_bytes is None else max(1, self.required_bytes // self.itemsize)

    @property
    def recommended(self) -> int | None:
        return None if self.recommended_bytes is None else max(1, self.recommended_bytes // self.itemsize)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "required": self.required, "recommended": self.recommended}


def tensor_core_alignment(dtype: str, arch: str) -> AlignmentRule:
    """The alignment rule for `dtype` on `arch` (see `arch_of` for what `arch` may be).

    16 bytes (8 fp16/bf16, 4 tf32, 16 fp8 elements) on every Tensor Core GPU: cuBLAS < 11 and
    cuDNN < 7.6.3 used Tensor Cores only then, and fp8 `_scaled_mm` still requires it. On A100 the
    guide recommends 128 bytes (64 fp16 elements, 32 tf32); perflab applies that to the data-centre
    parts that followed (H100, H200, B200) as an assumption, and says so in `note`.
    """
    from perflab.core.dtypes import parse_dtype

    dt = parse_dtype(dtype)
    name, cc = arch_of(arch)
    itemsize = dt.itemsize
    if name in {"cpu", "mps", "cdna3"}:
        what = {"cpu": "a CPU has no Tensor Cores", "mps": "Apple GPUs have no NVIDIA Tensor Cores",
                "cdna3": "AMD's matrix cores have their own rules (see AMD's ROCm tuning guides)"}[name]
        return AlignmentRule(dt.name, name, itemsize, None, None, f"{what}: the NVIDIA alignment rule does not apply")
    if dt.name in {"fp32", "fp64"} and name in {"volta", "turing"}:
        return AlignmentRule(dt.name, name, itemsize, None, None,
                             f"{name} Tensor Cores do not run {dt.name} matmuls; only fp16 uses them")
    if dt.name == "fp32":
        return AlignmentRule(dt.name, name, itemsize, None, None,
                             "plain fp32 matmuls run on CUDA cores; choose tf32 (or bf16) to use Tensor Cores")
    if dt.name in {"bf16", "tf32"} and name in {"volta", "turing"}:
        return AlignmentRule(dt.name, name, itemsize, None, None, f"{dt.name} needs Ampere or newer")
    if dt.name == "fp8" and name not in {"ada", "hopper", "blackwell"}:
        return AlignmentRule(dt.name, name, itemsize, None, None, "fp8 needs Ada, Hopper or newer")
    if cc == "8.0":
        rec, note = 128, "A100: 128-byte multiples run best (guide §2.2)"
    elif name in {"hopper", "blackwell"}:
        rec, note = 128, (f"{name}: the guide tabulates A100's 128-byte rule; perflab assumes it holds for "
                          "later data-centre GPUs (measure to confirm)")
    else:
        rec, note = 16, f"{name}: 16-byte multiples (guide §2.2)"
    return AlignmentRule(dt.name, name, itemsize, 16, rec, note)


@dataclass(frozen=True)
class AlignmentCheck:
    dim: str
    value: int
    required: int | None
    recommended: int | None
    ok_required: bool | None
    ok_recommended: bool | None
    reason: str


def nearest_multiples(value: int, multiple: int) -> tuple[int, int]:
    """The multiples of `multiple` just below (or equal) and just above `value`."""
    lo = value - value % multiple
    return (lo if lo > 0 else multiple), (lo if value % multiple == 0 else lo + multiple)


def check_alignment(m: int, n: int, k: int, dtype: str, arch: str) -> list[AlignmentCheck]:
    """Per dimension: does it meet the Tensor Core multiples for `dtype` on `arch`, and if not, what would."""
    rule = tensor_core_alignment(dtype, arch)
    out = []
    for dim, v in (("m", m), ("n", n), ("k", k)):
        v = positive_int(dim, v)
        if rule.recommended is None or rule.required is None:
            out.append(AlignmentCheck(dim, v, None, None, None, None, rule.note))
            continue
        ok_req = rule.required is not None and v % rule.required == 0
        ok_rec = v % rule.recommended == 0
        if ok_rec:
            reason = f"{dim}={v} is a multiple of {rule.recommended} ({rule.recommended_bytes} bytes of {rule.dtype})"
        else:
            lo, hi = nearest_multiples(v, rule.recommended)
            what = "meets the 16-byte minimum but" if ok_req else f"is not a multiple of {rule.required} (16 bytes) and"
            reason = f"{dim}={v} {what} is not a multiple of {rule.recommended}: try {lo} or {hi}" if lo != hi else \
                f"{dim}={v} {what} is not a multiple of {rule.recommended}: try {hi}"
        out.append(AlignmentCheck(dim, v, rule.required, rule.recommended, ok_req, ok_rec, reason))
    return out


# ---------------------------------------------------------------- the sizing checklist

def largest_pow2_divisor(x: int) -> int:
    """The largest power of two dividing x (x > 0): 4096 → 4096, 80 → 16, 50257 → 1."""
    x = positive_int("x", x)
    return x & -x


def pad_to_multiple(x: int, multiple: int) -> int:
    """x rounded up to a multiple of `multiple`: 50257 → 50304 for 64."""
    return ceil_div(positive_int("x", x), positive_int("multiple", multiple)) * multiple


@dataclass(frozen=True)
class CheckItem:
    rule: str
    ok: bool | None  # None: advice that a config cannot pass or fail
    detail: str

    @property
    def verdict(self) -> str:
        return {True: "pass", False: "FAIL", None: "note"}[self.ok]


CHECKLIST_SOURCE = ("Anthony et al., 'The Case for Co-Designing Model Architectures with Hardware' (arXiv:2401.14489), "
                    "summary of recommendations; restated in Stas Bekman, 'Machine Learning Engineering Open Book', "
                    "training/performance/README.md, 'Vector and matrix size divisibility → Final recommendations for "
                    "model sizing' (https://github.com/stas00/ml-engineering/tree/master/training/performance)")


def sizing_checklist(*, vocab: int, b: int, s: int, h: int, a: int, t: int = 1, d_ff: int | None = None,
                     pow2: int = 64, max_t: int = 8) -> list[CheckItem]:
    """The model-sizing checklist applied to one config, item by item, with the reason.

    1. V % 64 == 0 (the vocabulary is the n of the output layer's GEMM);
    2. b·s, h/a and h/t divisible by a high power of two (at least `pow2`, default 64);
    3. (b·a)/t an integer (heads split evenly over tensor-parallel ranks, per micro-batch);
    4. t small (≤ `max_t`: tensor parallelism inside one 8-GPU node);
    5. the micro-batch as large as memory allows (advice, not checkable from a config);
    6. with SwiGLU, a d_ff near 8/3·h that is a multiple of 64 (search with `perflab swiglu`).
    """
    vocab, b, s, h, a, t = (positive_int(nm, v) for nm, v in
                            (("vocab", vocab), ("b", b), ("s", s), ("h", h), ("a", a), ("t", t)))
    pow2 = positive_int("pow2", pow2)
    if pow2 & (pow2 - 1):
        raise InputError(f"pow2={pow2} must be a power of two (e.g. 64)")
    items = []
    if vocab % 64 == 0:
        items.append(CheckItem("vocab % 64 == 0", True, f"V={vocab} = 64 × {vocab // 64}"))
    else:
        items.append(CheckItem("vocab % 64 == 0", False,
                               f"V={vocab} leaves remainder {vocab % 64}: pad the vocabulary to {pad_to_multiple(vocab, 64)}"))

    def pow2_item(label: str, value: int | None, why_not: str | None = None) -> CheckItem:
        rule = f"{label} divisible by {pow2}"
        if value is None:
            return CheckItem(rule, False, why_not or "")
        p = largest_pow2_divisor(value)
        if p >= pow2:
            return CheckItem(rule, True, f"{label} = {value} = {p} × {value // p}")
        lo, hi = nearest_multiples(value, pow2)
        return CheckItem(rule, False, f"{label} = {value} is divisible only by {p}: aim for a multiple of {pow2} "
                                      f"(nearest: {lo} or {hi})" if lo != hi else
                         f"{label} = {value} is divisible only by {p}: aim for a multiple of {pow2}")

    items.append(pow2_item("b·s", b * s))
    items.append(pow2_item("h/a", h // a if h % a == 0 else None,
                           f"h={h} is not divisible by a={a}: the head size h/a must be a whole number"))
    items.append(pow2_item("h/t", h // t if h % t == 0 else None,
                           f"h={h} is not divisible by t={t}: each tensor-parallel rank needs a whole share"))
    if (b * a) % t == 0:
        items.append(CheckItem("(b·a)/t is an integer", True, f"(b·a)/t = {b * a}/{t} = {b * a // t}"))
    else:
        items.append(CheckItem("(b·a)/t is an integer", False,
                               f"(b·a)/t = {b * a}/{t} is not whole: choose a (or b) so that t divides b·a"))
    if t == 1:
        items.append(CheckItem(f"t small (≤ {max_t})", True, "t = 1: no tensor parallelism, nothing to communicate"))
    elif t <= max_t:
        items.append(CheckItem(f"t small (≤ {max_t})", True,
                               f"t = {t} stays inside one node; use the smallest t that fits in memory"))
    else:
        items.append(CheckItem(f"t small (≤ {max_t})", False,
                               f"t = {t} spans more than one {max_t}-GPU node: tensor parallelism's all-reduces "
                               "then cross the slow network; use pipeline or data parallelism across nodes"))
    items.append(CheckItem("micro-batch b as large as memory allows", None,
                           "its alignment matters little (b·s is what the GEMMs see), its size matters: "
                           "if 8 runs out of memory and 7 fits, use 7"))
    if d_ff is not None:
        d_ff = positive_int("d_ff", d_ff)
        ratio = d_ff / h
        if d_ff % 64 == 0:
            items.append(CheckItem("SwiGLU d_ff a multiple of 64 near 8/3·h", True,
                                   f"d_ff = {d_ff} = 64 × {d_ff // 64} ({ratio:.4g}·h; 8/3 = 2.667)"))
        else:
            lo, hi = nearest_multiples(d_ff, 64)
            items.append(CheckItem("SwiGLU d_ff a multiple of 64 near 8/3·h", False,
                                   f"d_ff = {d_ff} ({ratio:.4g}·h) is divisible only by {largest_pow2_divisor(d_ff)}: "
                                   f"measure {lo} and {hi} with `perflab swiglu --hidden {h}`"))
    return items


def checklist_frame(items: Sequence[CheckItem]):
    import pandas as pd

    return pd.DataFrame([{"check": i.rule, "verdict": i.verdict, "why": i.detail} for i in items])


def checklist_text(items: Sequence[CheckItem]) -> str:
    width = max(len(i.rule) for i in items)
    return "\n".join(f"[{i.verdict:>4}] {i.rule:<{width}}  {i.detail}" for i in items)


# ---------------------------------------------------------------- fitting a tile shape to a measurement

@dataclass
class TileFit:
    """How well each candidate tile (and blocks per SM) explains a measured time staircase."""

    table: Any  # DataFrame: tile, blocks_per_sm, sec_per_wave, overhead_s, rel_rms, r2 (best first)
    dim: str
    sms: int

    @property
    def best(self) -> dict[str, Any]:
        return self.table.iloc[0].to_dict()

    @property
    def best_tile(self) -> tuple[int, int]:
        return parse_tile(self.best["tile"])

    def frame(self, top: int = 5, unit: str = "SM"):
        """The fit for a person: candidates whose fits are the same (the same staircase over the
        measured range, so the same line) merged into one row that names them all; named columns
        with units; the best `top` distinct fits."""
        import pandas as pd

        from perflab.core.readout import num, percent, seconds

        groups: dict[tuple, dict[str, Any]] = {}
        for r in self.table.to_dict("records"):
            key = (round(r["sec_per_wave"], 15), round(r["overhead_s"], 15), round(r["rel_rms"], 12), r["steps"])
            g = groups.setdefault(key, {**r, "names": []})
            g["names"].append(f"{r['tile']} ×{int(r['blocks_per_sm'])}")
        rows = []
        for g in list(groups.values())[:top]:
            rows.append({f"tile × blocks per {unit}": ", ".join(g["names"]),
                         "time per wave": seconds(g["sec_per_wave"]) if g["sec_per_wave"] > 0 else "– (flat)",
                         "fixed time": seconds(g["overhead_s"]) if g["overhead_s"] > 0 else "0 s",
                         "RMS error (relative)": percent(g["rel_rms"]),
                         "R²": "–" if g["r2"] != g["r2"] else num(g["r2"], 2),
                         "steps in the range": int(g["steps"])})
        return pd.DataFrame(rows)


def fit_tile(values: Sequence[int], times_s: Sequence[float], dim: str, fixed: dict[str, int], *, sms: int,
             tiles: Iterable[tuple[int, int]] = TILE_SHAPES, blocks_per_sm: Iterable[int] = (1, 2)) -> TileFit:
    """Fit t ≈ sec_per_wave · waves(value) + overhead for every candidate tile; rank by residual.

    A least-squares line (on relative error) through the measured times against each candidate's
    wave count (the slope must be positive, the overhead at least zero: a fit that wants a negative
    overhead is refitted through the origin). The tile whose staircase puts its steps where the measurement steps
    has the smallest relative RMS residual. Needs at least 3 points.
    """
    import numpy as np
    import pandas as pd

    xs = [int(v) for v in values]
    ts = np.asarray([float(t) for t in times_s], dtype=float)
    if len(xs) != len(ts) or len(xs) < 3:
        raise InputError("fitting a tile needs at least 3 measured points (one time per value)")
    if not np.all(np.isfinite(ts)) or np.any(ts <= 0):
        raise InputError("measured times must be positive numbers")
    rows = []
    for tile in tiles:
        for bps in blocks_per_sm:
            w = np.asarray([wave_count(tile_count(*_shape(dim, v, fixed)[:2], *tile), sms, bps) for v in xs], dtype=float)
            if np.ptp(w) == 0:  # a flat staircase explains nothing about where steps fall
                slope, icpt = 0.0, float(ts.mean())
            else:
                # least squares on the relative error (weights 1/t): one slow outlier cannot pull the line
                A = np.stack([w, np.ones_like(w)], axis=1) / ts[:, None]
                (slope, icpt), *_ = np.linalg.lstsq(A, np.ones_like(ts), rcond=None)
                if icpt < 0:  # a fixed time cannot be negative: the line through the origin instead
                    x = w / ts
                    slope, icpt = float(np.sum(x) / np.sum(x * x)), 0.0
                if slope <= 0:
                    slope, icpt = 0.0, float(ts.mean())
            pred = slope * w + icpt
            resid = ts - pred
            rel_rms = float(np.sqrt(np.mean((resid / ts) ** 2)))
            ss_tot = float(np.sum((ts - ts.mean()) ** 2))
            r2 = 1 - float(np.sum(resid ** 2)) / ss_tot if ss_tot > 0 else float("nan")
            rows.append({"tile": f"{tile[0]}x{tile[1]}", "blocks_per_sm": bps, "sec_per_wave": float(slope),
                         "overhead_s": float(icpt), "rel_rms": rel_rms, "r2": r2,
                         "steps": int(np.count_nonzero(np.diff(w)))})
    table = pd.DataFrame(rows).sort_values(["rel_rms", "steps"]).reset_index(drop=True)
    return TileFit(table, dim, sms)


def fitted_staircase(fit_row: dict[str, Any], values: Sequence[int], dim: str, fixed: dict[str, int], sms: int) -> list[float]:
    """The fitted times (seconds) of one row of `fit_tile`'s table along `values`."""
    tile = parse_tile(fit_row["tile"])
    out = []
    for v in values:
        m, n, _k = _shape(dim, int(v), fixed)
        out.append(fit_row["sec_per_wave"] * wave_count(tile_count(m, n, *tile), sms, int(fit_row["blocks_per_sm"]))
                   + fit_row["overhead_s"])
    return out


# ---------------------------------------------------------------- measuring along one dimension

def sweep_points(dim: str, values: Iterable[int], fixed: dict[str, int], dtype: str) -> list[dict[str, Any]]:
    """The {m, n, k, dtype} points of a sweep over one dimension."""
    pts = []
    for v in values:
        m, n, k = _shape(dim, positive_int(dim, v), fixed)
        pts.append({"m": m, "n": n, "k": k, "dtype": dtype})
    return pts


def sweep_dimension(dim: str, values: Iterable[int], fixed: dict[str, int], dtype: str = "bf16", device=None, *,
                    name: str | None = None, rep_ms: float = 50, warmup_ms: float = 10, progress: bool = True):
    """Measure the GEMM at every value of `dim` (others fixed) on `device`, as a resumable sweep.

    Returns perflab.core.results.SweepResult; each row has median_s, tflops, peak_fraction, intensity.
    """
    from perflab.core.measure import sweep_matmul

    pts = sweep_points(dim, values, fixed, dtype)
    label = name or f"gemm_{dim}_sweep"
    return sweep_matmul(pts, device, name=label, rep_ms=rep_ms, warmup_ms=warmup_ms, progress=progress)


def fine_values(start: int, stop: int, step: int, name: str = "range") -> list[int]:
    """start, start+step, ... up to and including stop; sizes below 1 are skipped. `name` labels
    the one-line error (e.g. '--m-range')."""
    try:
        start, stop, step = int(start), int(stop), int(step)
    except (TypeError, ValueError):
        raise InputError(f"{name} needs three whole numbers: START STOP STEP") from None
    if step < 1:
        raise InputError(f"{name} step must be ≥ 1 (got {step})")
    if stop < start:
        raise InputError(f"{name} {start} {stop} {step} is empty: STOP must be ≥ START")
    vals = [v for v in range(start, stop + 1, step) if v >= 1]
    if not vals:
        raise InputError(f"{name} {start} {stop} {step} holds no size ≥ 1: raise STOP")
    return vals


def sm_count_of(device_info=None, gpu: str | None = None) -> tuple[int | None, str]:
    """SM count for the model and where it came from: a table id/name `gpu`, else the current CUDA
    device, else (None, reason)."""
    if gpu:
        from perflab.core.hardware import lookup

        spec = lookup(gpu)
        if spec is None:
            raise InputError(f"unknown GPU {gpu!r}: use an id from `perflab env`'s table, e.g. a100-sxm-80gb or h100-sxm")
        if not spec.sm_count:
            raise InputError(f"{spec.name}'s SM count is not published; pass --sms")
        return int(spec.sm_count), f"{spec.name} ({spec.sources.get('sm_count', 'datasheet')})"
    if device_info is not None and device_info.kind == "cuda":
        return int(device_info.details["sm_count"]), f"{device_info.name} (reported by the driver)"
    return None, "no CUDA GPU here"


# ---------------------------------------------------------------- helpers the lessons call

@dataclass(frozen=True)
class ModelTarget:
    """The GPU a lesson's model describes: this machine's GPU, or one chosen from the hardware table."""

    spec: Any  # perflab.core.hardware.AcceleratorSpec or None (a GPU not in the table)
    sms: int
    label: str
    this_machine: bool

    def peak(self, dtype: str) -> float | None:
        return self.spec.peak(dtype) if self.spec is not None else None

    @property
    def bandwidth_gbps(self) -> float | None:
        return self.spec.memory_bandwidth_gbps if self.spec is not None else None


THIS_GPU = "this GPU"
DEFAULT_GPU = "a100-sxm-80gb"  # the guide's worked example is on an A100


def model_target(info, gpu: str | None = None) -> ModelTarget:
    """The GPU the model describes: `gpu` (an id or name from the hardware table), or — when `gpu`
    is None or THIS_GPU — this machine's GPU if it has one (SM count from the driver), else an A100."""
    from perflab.core.hardware import lookup

    if gpu in (None, THIS_GPU):
        if info is not None and getattr(info, "kind", None) == "cuda":
            spec = lookup(info.name)
            return ModelTarget(spec, int(info.details["sm_count"]), f"{info.name} (this machine)", True)
        gpu = DEFAULT_GPU
    spec = lookup(gpu)
    if spec is None or not spec.sm_count:
        raise InputError(f"{gpu!r} is not a GPU with a published SM count in perflab's table: try a100-sxm-80gb or h100-sxm")
    here = info is not None and getattr(info, "kind", None) == "cuda" and lookup(info.name) is spec
    return ModelTarget(spec, int(spec.sm_count), spec.name + (" (this machine)" if here else " (model only: not this machine)"),
                       here)


def gpu_choices(info=None) -> list[str]:
    """Options for a 'which GPU' control: this GPU (when there is one), then every table id with an SM count."""
    from perflab.core.hardware import accelerators

    ids = [a.id for a in accelerators() if a.sm_count]
    return ([THIS_GPU] if info is not None and getattr(info, "kind", None) == "cuda" else []) + ids


def explain_gemm(m: int, n: int, k: int, *, dtype: str, target: ModelTarget, tile=(256, 128), extra_sms: int = 0):
    """One GEMM through every model, as a two-column table: tiles, waves, utilization, intensity,
    roofline, predicted TFLOP/s and Tensor Core alignment (with `extra_sms` more SMs when asked)."""
    import pandas as pd

    from perflab.core.dtypes import parse_dtype

    dt = parse_dtype(dtype)
    itemsize = 4 if dt.name == "tf32" else dt.itemsize
    sms = target.sms + int(extra_sms)
    w = wave_model(m, n, k, sms=sms, tile=tile, itemsize=itemsize)
    rows = [("SMs (wave size)", f"{sms} × 1 block = {w.wave_size}" + (f"  (+{extra_sms} what-if)" if extra_sms else "")),
            ("tiles", f"{w.tiles_m} × {w.tiles_n} = {w.tiles}"),
            ("waves", f"{w.waves} (last wave {w.last_wave_tiles}/{w.wave_size} busy)"),
            ("tile utilization", f"{w.tile_utilization:.1%}"), ("wave utilization", f"{w.wave_utilization:.1%}"),
            ("utilization", f"{w.utilization:.1%}"),
            ("arithmetic intensity", f"{w.arithmetic_intensity:.1f} FLOPs/byte")]
    peak = target.peak(dt.name)
    if peak and extra_sms:  # the what-if chip: each SM as fast as before, so the peak grows with the SM count
        peak = peak * sms / target.sms
    if target.spec is not None:
        rb = roofline_bound(m, n, k, dt.name, target.spec)
        if peak:
            pred = predicted_tflops(m, n, k, sms=sms, tile=tile, peak_tflops=peak, bandwidth_gbps=target.bandwidth_gbps,
                                    itemsize=itemsize)
            rows += [("roofline", f"{rb['bound']} (ridge {rb['ridge']:.0f} FLOPs/byte)"),
                     ("predicted time", f"{2 * m * n * k / pred / 1e12 * 1e3:.4g} ms"),
                     ("predicted", f"{pred:.4g} TFLOP/s of {peak:.4g} peak ({pred / peak:.0%})")]
        else:
            rows.append(("roofline", f"{target.spec.name} has no dense {dt.name} mode"))
        for c in check_alignment(m, n, k, dt.name, target.spec.id):
            rows.append((f"alignment {c.dim}", c.reason))
    return pd.DataFrame(rows, columns=["quantity", "value"]).set_index("quantity")


def alignment_table(dtypes: Sequence[str] = ("fp16", "bf16", "tf32", "fp8", "fp32"),
                    archs: Sequence[str] = ("v100-sxm2-32gb", "a100-sxm-80gb", "l4", "h100-sxm")):
    """Recommended multiple (elements) per dtype and GPU; '—' where Tensor Cores do not run that dtype."""
    import pandas as pd

    from perflab.core.hardware import lookup

    data = {}
    for a in archs:
        spec = lookup(a)
        col = spec.name if spec else a
        data[col] = {d: (tensor_core_alignment(d, a).recommended or "—") for d in dtypes}
    return pd.DataFrame(data)
