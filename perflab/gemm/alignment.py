"""Tensor Core alignment: the multiples of 16 or 128 bytes a GEMM's dimensions need to run at full
speed, per dtype and GPU architecture (NVIDIA's Matrix Multiplication Background User's Guide, §2.2;
lesson 04). `perflab.gemm.shapes` re-exports every name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, to_json
from perflab.core.validate import positive_int

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

    def as_dict(self) -> JSON:
        """The rule with its multiples in elements, for a command's JSON."""
        return {**to_json(self), "required": self.required, "recommended": self.recommended}


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
