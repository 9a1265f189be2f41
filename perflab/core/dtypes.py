"""Data types by the names people use, and which device can multiply in which.

`parse_dtype("bf16")`, `parse_dtype("bfloat16")` and `parse_dtype("torch.bfloat16")` give the
same `DType`. `tf32` is not a storage type: it is float32 storage with the tensor cores'
reduced-precision math mode, so its `torch_dtype` is float32 and `math_mode` says "tf32".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from perflab.core.errors import InputError, UnsupportedError

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclass(frozen=True)
class DType:
    name: str  # canonical short name: fp64, fp32, tf32, bf16, fp16, fp8
    torch_name: str  # attribute of the torch module holding the storage dtype
    itemsize: int  # bytes per element in memory
    math_mode: str = "ieee"  # "tf32" for TF32 math on float32 storage

    @property
    def torch_dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.torch_name)

    def __str__(self) -> str:
        return self.name


DTYPES: dict[str, DType] = {
    "fp64": DType("fp64", "float64", 8),
    "fp32": DType("fp32", "float32", 4),
    "tf32": DType("tf32", "float32", 4, "tf32"),
    "bf16": DType("bf16", "bfloat16", 2),
    "fp16": DType("fp16", "float16", 2),
    "fp8": DType("fp8", "float8_e4m3fn", 1),
}

_ALIASES = {
    "float64": "fp64", "double": "fp64", "f64": "fp64",
    "float32": "fp32", "float": "fp32", "f32": "fp32",
    "tensorfloat32": "tf32", "tensorfloat-32": "tf32",
    "bfloat16": "bf16",
    "float16": "fp16", "half": "fp16", "f16": "fp16",
    "float8": "fp8", "float8_e4m3fn": "fp8", "e4m3": "fp8", "fp8_e4m3": "fp8",
}

MATMUL_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


def parse_dtype(name: str | DType | torch.dtype) -> DType:
    """The `DType` for a name such as 'bf16', 'bfloat16', 'torch.bfloat16' or a torch dtype."""
    if isinstance(name, DType):
        return name
    key = str(name).strip().lower().removeprefix("torch.")
    key = _ALIASES.get(key, key)
    if key not in DTYPES:
        raise InputError(f"unknown dtype {str(name)!r}: use one of {', '.join(DTYPES)}")
    return DTYPES[key]


def unsupported_reason(dtype: str | DType, device: torch.device | str) -> str | None:
    """Why `device` cannot run a matmul in `dtype`, or None when it can."""
    import torch

    dt = parse_dtype(dtype)
    dev = torch.device(device)
    if dev.type == "cpu":
        if dt.name == "tf32":
            return "tf32 is a tensor-core math mode of NVIDIA GPUs (compute capability 8.0+); on a CPU use fp32"
        if dt.name == "fp8":
            return "fp8 matmuls need an NVIDIA GPU of compute capability 8.9+ (Ada, Hopper, Blackwell); on a CPU use bf16 or fp32"
        return None
    if dev.type == "mps":
        if dt.name in {"tf32", "fp8", "fp64"}:
            return f"{dt.name} is not available on Apple GPUs (MPS); use fp32, fp16 or bf16"
        return None
    if dev.type == "cuda":
        if torch.version.hip:  # ROCm build: AMD GPU behind the cuda device type
            if dt.name == "tf32":
                return "tf32 is an NVIDIA math mode; on AMD GPUs use fp32 or bf16"
            if dt.name == "fp8":
                return "fp8 matmuls are measured on NVIDIA GPUs only in perflab; use bf16"
            return None
        major, minor = torch.cuda.get_device_capability(dev)
        cc = major + minor / 10
        if dt.name in {"tf32", "bf16"} and cc < 8.0:
            return f"{dt.name} needs compute capability 8.0+ (Ampere or newer); this GPU is {major}.{minor}: use fp16 or fp32"
        if dt.name == "fp8" and cc < 8.9:
            return f"fp8 needs compute capability 8.9+ (Ada, Hopper, Blackwell); this GPU is {major}.{minor}: use bf16 or fp16"
        return None
    return f"perflab does not measure on device type {dev.type!r}; use cuda, mps or cpu"


def check_supported(dtype: str | DType, device: torch.device | str) -> DType:
    """Return the parsed dtype, or raise `UnsupportedError` saying what to use instead."""
    dt = parse_dtype(dtype)
    reason = unsupported_reason(dt, device)
    if reason:
        raise UnsupportedError(reason)
    return dt


def supported_matmul_dtypes(device: torch.device | str) -> list[str]:
    """The matmul dtypes (of fp32, tf32, bf16, fp16, fp8) this device can run."""
    return [d for d in MATMUL_DTYPES if unsupported_reason(d, device) is None]


def native_bf16(device: torch.device | str, flags: frozenset[str] | set[str] | None = None) -> tuple[bool, str]:
    """Does `device` multiply bf16 natively? (answer, the reason in words).

    On a CPU the answer comes from its instruction set (`flags`, default: /proc/cpuinfo's): AMX tiles
    (`amx_bf16`) or AVX-512 bf16 dot products (`avx512_bf16`) on x86, the `bf16` extension on Arm.
    Without them torch widens every bf16 product to fp32 and rounds it back, which on an AVX2-only
    CPU ran about 50x slower than fp32 (1.3 against 16-120 GFLOP/s on a 2-core AMD EPYC).
    """
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        if torch.version.hip:  # pragma: no cover - ROCm build
            return True, "AMD GPU matrix cores run bf16"
        major, _ = torch.cuda.get_device_capability(dev)
        if major >= 8:
            return True, "bf16 Tensor Cores (compute capability 8.0+)"
        return False, "this GPU has no bf16 Tensor Cores (compute capability below 8.0)"
    if dev.type == "mps":
        return False, "Apple GPUs run fp16 at least as fast as bf16"
    if flags is None:
        from perflab.core.device import cpu_facts

        flags = cpu_facts().flags
    if "amx_bf16" in flags:
        return True, "AMX bf16 tiles (amx_bf16)"
    if "avx512_bf16" in flags:
        return True, "AVX-512 bf16 dot products (avx512_bf16), at most twice the fp32 rate per instruction"
    if "bf16" in flags:  # Arm's FEAT_BF16 (Graviton 3, Neoverse V1/V2, Apple M2+)
        return True, "Arm bf16 matrix instructions (the bf16 feature)"
    return False, ("no bf16 instructions on this CPU (no avx512_bf16 / amx_bf16): every bf16 product is widened "
                   "to fp32, multiplied and rounded back, so bf16 costs conversions and gains nothing")


def fast_dtype(device: torch.device | str, flags: frozenset[str] | set[str] | None = None) -> tuple[DType, str]:
    """The matmul dtype a measurement should use by default on `device`, and why, in words.

    bf16 where the hardware multiplies it natively; else fp16 where that is native (Volta/Turing
    Tensor Cores, Apple GPUs, x86 `amx_fp16`/`avx512_fp16`); else fp32. A command that defaults to
    this says which it chose and why, so a learner on an AVX2-only CPU is not left waiting for a
    bf16 sweep that runs fifty times slower than fp32.
    """
    import torch

    dev = torch.device(device)
    ok, why = native_bf16(dev, flags)
    if ok:
        return DTYPES["bf16"], why
    if dev.type == "cuda":
        major, _ = torch.cuda.get_device_capability(dev)
        if major >= 7:
            return DTYPES["fp16"], f"fp16 Tensor Cores (compute capability {major}.x), and {why}"
        return DTYPES["fp32"], f"no Tensor Cores on this GPU (compute capability {major}.x)"
    if dev.type == "mps":
        return DTYPES["fp16"], why
    if flags is None:
        from perflab.core.device import cpu_facts

        flags = cpu_facts().flags
    if "amx_fp16" in flags or "avx512_fp16" in flags:
        return DTYPES["fp16"], "native fp16 on this CPU (amx_fp16 / avx512_fp16), and " + why
    return DTYPES["fp32"], why
