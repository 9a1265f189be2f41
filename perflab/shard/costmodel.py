"""What sharding's communication costs in time, and when FSDP's prefetch hides it.

    >>> collective_seconds("all_gather", 1e9, 8, busbw_gbps=100)   # seconds, nccl-tests' busbw convention
    >>> step_traffic(124e6, 8, itemsize=2)                          # bytes each rank sends, DDP vs ZeRO-3
    >>> prefetch(unit_bytes=57e6, n=8, busbw_gbps=100, unit_forward_s=2e-3)
    >>> example(preset("gpt2-small"), 8, 8 * 1024).table()                # lesson 12's table: per link

* **Time = bytes ÷ bandwidth.** nccl-tests define a collective's bus bandwidth as
  busbw = (S / t) · factor(op, n) (lesson 06, `perflab.distributed.busbw`), so a collective of S bytes
  on a link that sustains `busbw` takes t = S · factor(op, n) / busbw. `factor · S` is also the
  number of bytes each rank sends (and receives) in the ring algorithm.
* **Traffic per step, Ψ parameters** (Rajbhandari et al. 2020, *ZeRO: Memory Optimizations Toward
  Training Trillion Parameter Models*, arXiv:1910.02054, §7 "Communication Analysis of ZeRO-DP"):
  data parallelism all-reduces the gradients: a reduce-scatter and an all-gather, 2Ψ per rank
  (times (n−1)/n). ZeRO-3 / FSDP all-gathers the parameters before the forward and again before the
  backward and reduce-scatters the gradients: 3Ψ, 1.5× DDP's.
* **Prefetch.** FSDP issues the all-gather of the next unit while the current unit computes; the
  gather is hidden when it takes no longer than that unit's compute, and the rest is exposed.
"""

from __future__ import annotations

from dataclasses import dataclass

from perflab.core.errors import InputError
from perflab.distributed.busbw import bus_factor

# per step, in units of Ψ·itemsize·(n−1)/n: (collective, how many times)
TRAFFIC = {
    "ddp": (("reduce_scatter", 1), ("all_gather", 1)),  # one all-reduce of the gradients (ring: RS + AG)
    "zero3": (("all_gather", 2), ("reduce_scatter", 1)),  # parameters forward + backward, gradients once
}
SOURCE = ("Rajbhandari et al. 2020, 'ZeRO: Memory Optimizations Toward Training Trillion Parameter Models', "
          "https://arxiv.org/abs/1910.02054, §7 'Communication Analysis of ZeRO-DP'")


def _positive(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise InputError(f"{name} must be a positive number (got {v!r})")
    return float(v)


def collective_seconds(op: str, nbytes: float, n: int, *, busbw_gbps: float) -> float:
    """Seconds for one collective of `nbytes` (nccl-tests' S) on n ranks at `busbw_gbps` (GB/s, 1e9)."""
    nbytes = _positive("bytes", nbytes)
    return nbytes * bus_factor(op, n) / (_positive("busbw_gbps", busbw_gbps) * 1e9)


@dataclass(frozen=True)
class Traffic:
    """What one rank sends per training step under one strategy: bytes, the same in units of Ψ·itemsize,
    the collectives (one entry per call), and their seconds at the given busbw (None: no busbw given)."""

    bytes: float
    psi: float
    ops: list[str]
    seconds: float | None = None


@dataclass(frozen=True)
class StepTraffic:
    """DDP's and ZeRO-3's traffic per rank and step for Ψ parameters (`psi_bytes` = Ψ·itemsize), and
    their ratio (1.5); `source`: where the 2Ψ and 3Ψ come from."""

    psi_bytes: float
    source: str
    ddp: Traffic
    zero3: Traffic

    @property
    def ratio(self) -> float:
        return self.zero3.bytes / self.ddp.bytes


def step_traffic(n_params: float, n: int, *, itemsize: int = 2, busbw_gbps: float | None = None) -> StepTraffic:
    """Bytes each rank sends per training step under DDP and ZeRO-3 (FSDP), and in units of Ψ·itemsize;
    with `busbw_gbps`, the seconds of communication too (none of it overlapped)."""
    psi = _positive("parameters", n_params) * _positive("itemsize", itemsize)
    out: dict[str, Traffic] = {}
    for strategy, ops in TRAFFIC.items():
        sent = sum(k * bus_factor(op, n) * psi for op, k in ops)
        seconds = None
        if busbw_gbps is not None:
            seconds = sum(k * collective_seconds(op, psi, n, busbw_gbps=busbw_gbps) for op, k in ops)
        out[strategy] = Traffic(sent, sent / psi, [op for op, k in ops for _ in range(k)], seconds)
    return StepTraffic(psi, SOURCE, out["ddp"], out["zero3"])


@dataclass(frozen=True)
class PhaseOverlap:
    """A unit's all-gather against the compute of one phase: the compute's seconds, the gather's
    exposed seconds (0 when hidden) and whether it is hidden."""

    compute_s: float
    exposed_s: float
    hidden: bool


@dataclass(frozen=True)
class Prefetch:
    """One FSDP unit's all-gather (seconds) against the forward and the backward it overlaps with;
    `break_even_forward_s`: the forward time from which it hides."""

    gather_s: float
    forward: PhaseOverlap
    backward: PhaseOverlap
    break_even_forward_s: float


def prefetch(*, unit_bytes: float, n: int, busbw_gbps: float, unit_forward_s: float) -> Prefetch:
    """One FSDP unit's all-gather (`unit_bytes` unsharded) against the compute it overlaps with.

    In the forward the next unit's gather overlaps this unit's forward (`unit_forward_s`); in the
    backward it overlaps this unit's backward, about twice the forward."""
    gather = collective_seconds("all_gather", unit_bytes, n, busbw_gbps=busbw_gbps)
    fwd = _positive("unit_forward_s", unit_forward_s)

    def phase(compute: float) -> PhaseOverlap:
        return PhaseOverlap(compute, max(0.0, gather - compute), gather <= compute)

    return Prefetch(gather, phase(fwd), phase(2 * fwd), gather)


@dataclass(frozen=True)
class LinkCost:
    """One link of `example`: its busbw (GB/s), the step's traffic under DDP and ZeRO-3, and one block's
    all-gather against its forward."""

    name: str
    busbw_gbps: float
    traffic: StepTraffic
    prefetch: Prefetch


@dataclass(frozen=True)
class CostExample:
    """Lesson 12's cost model: a model's Ψ parameters in `itemsize`-byte elements on n ranks, each rank
    `tokens` per step; one transformer block's parameters and its forward at the accelerator's peak
    (`peak_tflops`, its shortest possible time); and what each link makes of it."""

    model: str
    psi: int
    n: int
    tokens: int
    itemsize: int
    block_params: int
    peak_tflops: float
    block_forward_s: float
    links: list[LinkCost]

    def describe(self) -> str:
        dtype = {2: "bf16", 4: "fp32"}.get(self.itemsize, f"{self.itemsize}-byte")
        return (f"{self.model}: Ψ = {self.psi:,} parameters, {dtype}; {self.n} ranks; {self.tokens:,} tokens per rank; "
                f"one block = {self.block_params:,} parameters; H100 bf16 peak {self.peak_tflops:g} TFLOP/s")

    def table(self):
        """One column per link: what each rank sends and its time under DDP and ZeRO-3, one block's
        all-gather against its forward, and whether prefetch hides it in the forward and the backward."""
        import pandas as pd

        from perflab.core.readout import nbytes, seconds

        def hidden(ph: PhaseOverlap) -> str:
            return "yes" if ph.hidden else f"no, {seconds(ph.exposed_s)} exposed"

        rows = [{"link (busbw)": f"{lk.name} ({lk.busbw_gbps:g} GB/s)", "DDP sends": nbytes(lk.traffic.ddp.bytes),
                 "ZeRO-3 sends": f"{nbytes(lk.traffic.zero3.bytes)} ({lk.traffic.ratio:g}× DDP)",
                 "DDP comm": seconds(lk.traffic.ddp.seconds), "ZeRO-3 comm": seconds(lk.traffic.zero3.seconds),
                 "one block's all-gather": seconds(lk.prefetch.gather_s), "block forward at peak": seconds(self.block_forward_s),
                 "hidden in forward": hidden(lk.prefetch.forward), "hidden in backward": hidden(lk.prefetch.backward)}
                for lk in self.links]
        return pd.DataFrame(rows).set_index("link (busbw)").T


def example(cfg, n: int = 8, tokens: int = 8 * 1024, *, itemsize: int = 2, accelerator: str = "h100-sxm",
            link_ids: tuple[str, ...] = ("nvlink4-h100", "ib-ndr-400"), busbw_here: float | None = None) -> CostExample:
    """`step_traffic` and `prefetch` of `cfg` (a `perflab.workload.models` config) on n ranks for each
    link of `perflab.distributed.overlap` (its datasheet bandwidth as busbw), and for `busbw_here` (GB/s,
    lesson 06's measurement on this machine) when given; one block's forward is its matmuls at the
    accelerator's bf16 peak."""
    from perflab.distributed import overlap
    from perflab.shard.formulas import fsdp_units
    from perflab.workload.models import param_count

    psi = param_count(cfg)
    block = next(u for u in fsdp_units(cfg) if not u.root)
    named = [(lk.name, lk.per_direction_gbps) for lk in (overlap.link(i) for i in link_ids)]
    if busbw_here:
        named.append(("this machine (lesson 06)", _positive("busbw_here", busbw_here)))
    peak = overlap.hardware(accelerator, link_ids[0]).peak_tflops
    fwd = 2 * block.numel * tokens / (peak * 1e12)  # the block's matmuls at the bf16 peak
    links = [LinkCost(name, bw, step_traffic(psi, n, itemsize=itemsize, busbw_gbps=bw),
                      prefetch(unit_bytes=block.numel * itemsize, n=n, busbw_gbps=bw, unit_forward_s=fwd))
             for name, bw in named]
    return CostExample(cfg.name, psi, n, tokens, itemsize, block.numel, peak, fwd, links)
