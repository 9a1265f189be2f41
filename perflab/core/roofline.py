"""The roofline model: how fast a kernel can be, given its arithmetic intensity.

attainable FLOP/s = min(peak FLOP/s, intensity × memory bandwidth), where intensity is FLOPs per
byte moved to and from memory. Below the ridge point (peak / bandwidth) a kernel is
memory-bound; above it, compute-bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from perflab.core.validate import positive_int


def matmul_bytes(m: int, n: int, k: int, itemsize: int) -> int:
    """Fewest bytes a matmul must move: read A and B once, write C once."""
    return (m * k + k * n + m * n) * itemsize


def matmul_intensity(m: int, n: int, k: int, itemsize: int) -> float:
    """FLOPs per byte of an (m×k)·(k×n) matmul with `itemsize`-byte elements: 2mnk / bytes."""
    m, n, k = positive_int("m", m), positive_int("n", n), positive_int("k", k)
    return 2 * m * n * k / matmul_bytes(m, n, k, itemsize)


def attainable_flops(intensity: float, peak_flops: float, bandwidth_bytes_per_s: float) -> float:
    """The roofline: min(peak, intensity × bandwidth), in FLOP/s."""
    return min(peak_flops, intensity * bandwidth_bytes_per_s)


def ridge_point(peak_flops: float, bandwidth_bytes_per_s: float) -> float:
    """Intensity (FLOPs/byte) where the memory roof meets the compute roof."""
    return peak_flops / bandwidth_bytes_per_s


@dataclass(frozen=True)
class Roofline:
    peak_flops: float  # FLOP/s
    bandwidth: float  # bytes/s
    label: str = ""

    @property
    def ridge(self) -> float:
        return ridge_point(self.peak_flops, self.bandwidth)

    def attainable(self, intensity: float) -> float:
        return attainable_flops(intensity, self.peak_flops, self.bandwidth)

    def bound(self, intensity: float) -> str:
        return "memory-bound" if intensity < self.ridge else "compute-bound"


def device_roofline(info, peaks, dtype: str = "fp32", measured_bandwidth_gbps: float | None = None) -> tuple[Roofline | None, str]:
    """This device's roofline for `dtype`: peak from the spec sheet (GPU) or the estimate (CPU), and
    memory bandwidth from the spec sheet, else the measured copy bandwidth. Returns (roofline or
    None, a one-line description of where each number came from)."""
    peak = peaks.get(dtype)
    spec_bw = peaks.spec.memory_bandwidth_gbps if peaks.spec else None
    bw = spec_bw or measured_bandwidth_gbps
    if not peak or not bw:
        return None, f"no roofline for {dtype}: peak {'unknown' if not peak else 'known'}, bandwidth {'unknown' if not bw else 'known'}"
    src_peak = f"{peaks.source} peak {peak:.3g} TFLOP/s"
    src_bw = f"spec bandwidth {bw:g} GB/s" if spec_bw else f"measured copy bandwidth {bw:.3g} GB/s"
    return Roofline(peak * 1e12, bw * 1e9, label=f"{info.name} {dtype}"), f"{src_peak}; {src_bw}"


def elementwise_flops_and_bytes(numel: int, itemsize: int, op: str = "add") -> tuple[int, int]:
    """FLOPs and fewest bytes of a binary elementwise op c = a ∘ b: 1 FLOP and 3 elements per item."""
    positive_int("numel", numel)
    if op not in {"add", "mul"}:
        raise ValueError("op must be 'add' or 'mul'")
    return numel, 3 * numel * itemsize
