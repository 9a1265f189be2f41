"""What a planned step costs in time on a GPU nobody here has: a roofline per operator and lesson 06's
bus-bandwidth model per collective, replayed on a compute stream and a communication stream.

* **The cluster** (`cluster`): the GPU's dense peaks (`perflab.core.hardware.spec_peak`) and memory
  bandwidth from perflab's hardware table (perflab/core/data/accelerators.json, each figure with its
  datasheet), the links between GPUs from
  lesson 06's table (perflab/distributed/data/interconnects.json: NVLink inside a node, the NIC between
  nodes, per direction), 8 GPUs per node (data/clusters.json).
* **Compute, op by op** (`op_seconds`): an operator takes max(FLOPs ÷ peak, bytes ÷ bandwidth), the
  roofline torch's RuntimeEstimator uses in its cost-model mode (its `_roofline_estimate`), with the
  table's figures instead of the figures of a GPU in this machine (there is none). FLOPs are
  perflab.flops's count (products, convolutions and fused attention), at the peak of the dtype the op
  writes (fp32 products at the fp32 peak: TF32 is off by default in torch); bytes are every tensor the
  op reads and writes. Real kernels reach 60–80 % of the matmul peak at best, so this is a lower bound
  on the time (an upper bound on MFU).
* **Communication** (`collective_seconds`): S · factor(op, n) ÷ busbw (nccl-tests' convention, lesson
  06), with busbw the per-direction bandwidth of the slowest link the group crosses (NVLink when the
  group stays inside a node, the NIC when it spans nodes). A real NCCL reaches 70–90 % of it.
* **Hidden and exposed** (`replay`): compute runs in order on one stream; FSDP's all-gathers and
  reduce-scatters run in order on a second stream. An all-gather may start once the unit two places
  before it has finished computing (FSDP2 keeps at most two units gathered); the compute after it
  waits for it. A reduce-scatter starts when the gradients it reduces exist. Tensor parallelism's
  all-reduces block the compute stream (exposed). Exposed = step time − compute time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from perflab.core.errors import InputError
from perflab.core.hardware import DTYPE_KEYS, AcceleratorSpec, spec_peak
from perflab.core.jsonable import JSON

DTYPE_OF = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float64": "fp64"}


@lru_cache(maxsize=1)
def _clusters() -> JSON:
    return json.loads(resources.files("perflab.plan").joinpath("data/clusters.json").read_text())


@dataclass(frozen=True)
class Cluster:
    """The GPU, its links, and how many GPUs share a node."""

    gpu_id: str
    gpu_name: str
    spec: AcceleratorSpec  # the GPU's record of the hardware table: its peaks come from there
    memory_bytes: float
    bandwidth_gbps: float
    intra_id: str
    intra_gbps: float
    inter_id: str
    inter_gbps: float
    gpus_per_node: int
    sources: tuple[str, ...]

    def peak(self, dtype: str) -> float | None:
        """The GPU's dense peak TFLOP/s for `dtype` (`perflab.core.hardware.spec_peak`), None: no such mode."""
        return spec_peak(self.spec, dtype).tflops

    def peak_source(self, dtype: str) -> str:
        return spec_peak(self.spec, dtype).source

    def busbw_gbps(self, group_size: int, stride: int = 1) -> float:
        """The link a group of `group_size` ranks, `stride` ranks apart, is limited by: NVLink when the
        whole group fits in one node, else the NIC."""
        return self.intra_gbps if group_size * stride <= self.gpus_per_node else self.inter_gbps

    def as_dict(self) -> JSON:
        """The cluster for `perflab plan --json`."""
        return {"gpu": self.gpu_id, "name": self.gpu_name, "memory_gb": self.memory_bytes / 1e9,
                "bandwidth_gbps": self.bandwidth_gbps, "peak_tflops": {d: self.peak(d) for d in DTYPE_KEYS},
                "intra_link": self.intra_id, "intra_gbps": self.intra_gbps, "inter_link": self.inter_id,
                "inter_gbps": self.inter_gbps, "gpus_per_node": self.gpus_per_node, "sources": list(self.sources)}


def gpu_ids() -> list[str]:
    return sorted(_clusters()["links"]) + sorted(_clusters()["aliases"])


def cluster(gpu: str) -> Cluster:
    """The cluster for `--gpu`: an accelerator id of the hardware table or a short name (h100, a100, ...)."""
    from perflab.core.hardware import by_id
    from perflab.distributed.overlap import link

    data = _clusters()
    key = str(gpu).strip().lower()
    gid = data["aliases"].get(key, key)
    if gid not in data["links"]:
        raise InputError(f"--gpu {gpu!r} is not a GPU perflab can plan for: use one of {', '.join(gpu_ids())}")
    spec = by_id(gid)
    if not spec.memory_gb or not spec.memory_bandwidth_gbps:
        raise InputError(f"the hardware table gives no memory size or bandwidth for {spec.name}")
    lk = data["links"][gid]
    intra, inter = link(lk["intra"]), link(lk["inter"])
    sources = tuple(dict.fromkeys([*spec.sources.values(), intra.source, inter.source, *data["sources"].values()]))
    return Cluster(gid, spec.name, spec, spec.memory_gb * 1e9, spec.memory_bandwidth_gbps,
                   intra.id, intra.per_direction_gbps, inter.id, inter.per_direction_gbps, int(lk["gpus_per_node"]),
                   sources)


# ----------------------------------------------------------------------------- compute


def op_seconds(flops: float, nbytes: float, dtype: str, c: Cluster) -> float:
    """Roofline time of one operator: max(FLOPs ÷ peak of its dtype, bytes ÷ memory bandwidth)."""
    peak = c.peak(dtype) or c.peak("fp32") or 0.0
    compute = flops / (peak * 1e12) if flops and peak else 0.0
    return max(compute, nbytes / (c.bandwidth_gbps * 1e9))


def collective_seconds(op: str, nbytes: float, n: int, busbw_gbps: float) -> float:
    """nccl-tests' model: S · factor(op, n) ÷ busbw (0 for a group of one)."""
    from perflab.distributed.busbw import bus_factor

    if n <= 1 or nbytes <= 0:
        return 0.0
    return nbytes * bus_factor(op, n) / (busbw_gbps * 1e9)


# ----------------------------------------------------------------------------- the two streams


@dataclass
class Event:
    """One thing the step did, in the order it was issued: compute (`kind='compute'`), or a collective
    (`kind` its name) on the second stream (`overlap=True`: FSDP's) or blocking the compute (TP's)."""

    kind: str
    seconds: float
    unit: int = -1  # for FSDP's collectives: which gathered unit (its order of issue)
    overlap: bool = False
    nbytes: float = 0.0
    group: int = 1


@dataclass
class Replay:
    step_s: float
    compute_s: float
    comm_s: float
    exposed_s: float

    @property
    def hidden_s(self) -> float:
        return max(0.0, self.comm_s - self.exposed_s)


def replay(events: list[Event]) -> Replay:
    """Play the events on a compute stream and a communication stream (see the module docstring)."""
    t_compute = 0.0  # when the compute stream is free
    t_comm = 0.0  # when the communication stream is free
    unit_done: list[float] = []  # compute time when each overlapped collective was issued
    compute = comm = 0.0
    for e in events:
        if e.kind == "compute":
            t_compute += e.seconds
            compute += e.seconds
            continue
        comm += e.seconds
        if not e.overlap:  # blocking: the compute stream waits for everything before it and for this
            start = max(t_compute, t_comm)
            t_compute = t_comm = start + e.seconds
            continue
        # FSDP keeps at most two units in flight: this one may start once the compute issued two
        # collectives ago has run
        ready = unit_done[-2] if len(unit_done) >= 2 else 0.0
        if e.kind == "reduce_scatter":
            ready = t_compute  # the gradients it reduces were just computed
        start = max(t_comm, ready)
        t_comm = start + e.seconds
        unit_done.append(t_compute)
        if e.kind == "all_gather":  # the compute issued after a gather uses what it gathered
            t_compute = max(t_compute, t_comm)
    step = max(t_compute, t_comm)
    return Replay(step, compute, comm, max(0.0, step - compute))
