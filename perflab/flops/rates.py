"""Lesson 01's measurements: a count turned into a rate, and kernels placed on this device's roofline.

`roofline_run` measures n³ matmuls of growing n (a resumable sweep, `perflab.core.measure.sweep_matmul`),
an elementwise `a + b` (memory-bound at any size) and, where no datasheet gives the memory bandwidth (a
CPU), a copy that measures it; the roofline is then `perflab.core.roofline.device_roofline`. Every
measured figure carries the machine's quietness (`perflab.core.quietness`): a point measured on a busy
machine is marked in the table and the figure, and a sentence drawn from it says it is inconclusive.
Where a kernel sits against the ridge (memory- or compute-bound) is the model's, from its intensity: it
holds whatever the machine was doing, unless the roof itself was measured on a busy machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perflab.core.quietness import UNKNOWN, Quietness, as_quietness
from perflab.core.readout import MACHINE, machine, num, percent, seconds
from perflab.core.verdicts import busy_text


@dataclass(frozen=True)
class RooflinePoint:
    """One n³ matmul of the sweep."""

    n: int
    intensity: float  # FLOPs per byte moved
    median_s: float
    tflops: float
    peak_fraction: float | None
    quietness: Quietness = UNKNOWN


@dataclass(frozen=True)
class RooflineRun:
    """The sweep, the add and the roof they are read against."""

    dtype: str
    points: tuple[RooflinePoint, ...]
    add: Any  # perflab.core.measure.ElementwiseResult
    copy: Any  # perflab.core.measure.BandwidthResult: the memory roof where no datasheet gives it (None: unused)
    roof: Any  # perflab.core.roofline.Roofline, or None (the peak is unknown)
    where: str  # where the roof's two numbers came from

    @property
    def largest(self) -> RooflinePoint:
        return max(self.points, key=lambda p: p.n)

    @property
    def best_tflops(self) -> float:
        return max(p.tflops for p in self.points)

    @property
    def roof_busy(self) -> str | None:
        """The cause, when the roof's bandwidth was measured here on a busy machine (its ridge moves with it)."""
        q = self.roof_quietness
        return (q.cause or "quietness not measured") if q.disturbed else None

    @property
    def roof_quietness(self) -> Quietness:
        """The machine while the roof's measured bandwidth was timed (unknown where a datasheet gave it)."""
        q = getattr(self.copy, "quietness", None)
        return q if self.copy is not None and "measured copy" in self.where and isinstance(q, Quietness) else UNKNOWN

    @property
    def add_bound(self) -> str | None:
        """'memory-bound' or 'compute-bound': where `a + b` sits against the ridge (None: no roofline)."""
        return self.roof.bound(self.add.intensity) if self.roof is not None else None

    def no_roof(self) -> str:
        return "No roofline for this device (its peak is unknown), so a + b has no side of the ridge to land on."

    def frame(self):
        """The sweep and the add as the roofline figure draws them: intensity, TFLOP/s, a label, busy or not."""
        import pandas as pd

        rows = [{"intensity": p.intensity, "tflops": p.tflops, "label": f"{p.n}³", "disturbed": p.quietness.disturbed}
                for p in self.points]
        rows.append({"intensity": self.add.intensity, "tflops": self.add.tflops, "label": "a + b",
                     "disturbed": as_quietness(self.add.quietness).disturbed})
        return pd.DataFrame(rows)

    def table(self):
        import pandas as pd

        rows = [{"kernel": f"{p.n}³ matmul", "intensity (FLOP/byte)": num(p.intensity), "time per call": seconds(p.median_s),
                 "TFLOP/s": num(p.tflops), "share of peak": percent(p.peak_fraction) if p.peak_fraction else "–",
                 "side of the ridge": self._side(p.intensity), MACHINE: machine(p.quietness)} for p in self.points]
        a = self.add
        rows.append({"kernel": f"a + b ({a.numel:,} elements)", "intensity (FLOP/byte)": num(a.intensity),
                     "time per call": seconds(a.median_s), "TFLOP/s": num(a.tflops),
                     "share of peak": percent(a.tflops / (self.roof.peak_flops / 1e12)) if self.roof is not None else "–",
                     "side of the ridge": self._side(a.intensity), MACHINE: machine(as_quietness(a.quietness))})
        return pd.DataFrame(rows)

    def _side(self, intensity: float) -> str:
        if self.roof is None:
            return "no roofline"
        return self.roof.bound(intensity) + (" (roof measured on a busy machine)" if self.roof_busy else "")

    def sentences(self) -> str:
        """Where the ridge is, which side a + b and the largest matmul land on, and what a + b reached."""
        if self.roof is None:
            return self.no_roof()
        big = self.largest
        lines = [f"roofline inputs: {self.where}"]
        if self.roof_busy is not None:
            lines.append(f"{busy_text(self.roof_busy)}: the copy that set the memory roof ran on a busy machine, so the "
                         f"ridge ({num(self.roof.ridge)} FLOPs/byte here) and the side of it each kernel lands on may "
                         "differ on a quiet one; run the cell again when it is quiet")
        else:
            lines.append(f"ridge point: {num(self.roof.ridge)} FLOPs/byte; a + b at {num(self.add.intensity)} FLOPs/byte "
                         f"is {self.add_bound}; the {big.n}³ matmul at {num(big.intensity)} FLOPs/byte is "
                         f"{self.roof.bound(big.intensity)}")
        add_q = as_quietness(self.add.quietness)
        if add_q.disturbed:
            lines.append(f"a + b reached {num(self.add.gbps)} GB/s, measured on a busy machine ({add_q.cause}): not "
                         "this device's memory speed")
        else:
            lines.append(f"a + b reached {num(self.add.gbps)} GB/s (bytes read + written per second)")
        return "\n".join(lines)


def roofline_run(size: Any, dtype: str, device: Any, info: Any, peaks: Any) -> RooflineRun:
    """Lesson 01's section 3 at a row of its size table (`perflab.flops.sizes.RATES`): the matmul sweep, a + b,
    the copy that measures the memory roof where no datasheet gives it, and this device's roofline."""
    import torch

    from perflab.core.measure import measure_copy_bandwidth, measure_elementwise, sweep_matmul
    from perflab.core.roofline import device_roofline

    dev = torch.device(device)
    sweep = sweep_matmul([{"m": n, "n": n, "k": n, "dtype": dtype} for n in size.sweep_n], dev, name=f"01_roofline_{dtype}",
                         rep_ms=size.rep_ms)
    points = tuple(RooflinePoint(int(r["params"]["m"]), r["intensity"], r["median_s"], r["tflops"],
                                 r.get("peak_fraction"), as_quietness(r.get("quietness")))
                   for r in sweep.rows if r.get("status") == "ok")
    add = measure_elementwise(size.add_numel, dtype, dev, rep_ms=size.rep_ms)
    copy = measure_copy_bandwidth(size.copy_bytes, dev, rep_ms=size.rep_ms)
    roof, where = device_roofline(info, peaks, dtype, measured_bandwidth_gbps=copy.gbps)
    return RooflineRun(dtype, points, add, copy, roof, where)
