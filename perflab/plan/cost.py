"""What a planned step costs in time on a GPU nobody here has: a roofline per operator and lesson 06's
bus-bandwidth model per collective, replayed on the streams FSDP2 uses. An estimate, not a bound.

* **The cluster** (`perflab.plan.cluster`, re-exported here): the GPU's peaks and memory bandwidth, its
  nodes, and the bus bandwidth and latency of a collective across them.
* **Compute, op by op** (`op_seconds`): an operator takes max(FLOPs ÷ peak, bytes ÷ bandwidth), the
  roofline torch's RuntimeEstimator uses in its cost-model mode (its `_roofline_estimate`), with the
  table's figures instead of the figures of a GPU in this machine (there is none). FLOPs are
  perflab.flops's count (products, convolutions and fused attention), at the peak of the dtype the op
  writes (fp32 products at the fp32 peak: TF32 is off by default in torch); bytes are every tensor the
  op reads and writes. A causal attention kernel skips the masked half of its blocks (FlashAttention-2,
  §4.1): it is charged half its dense FLOPs. This is an estimate: every kernel at the datasheet's
  peak, no launch gaps, where real kernels reach 60–80 % of the matmul peak; and the plan's
  unfused model does more memory-bound work than a fused one. The two errors pull opposite ways
  (`perflab.plan.compare` says how far the plan lands from published runs); torch's own
  RuntimeEstimator, by contrast, books FLOPs ÷ 2 at 0.75 of the peak (torch/utils/_runtime_estimation.py).
* **Communication** (`collective_seconds`): NCCL's latency plus S · factor(op, n) ÷ busbw (nccl-tests'
  convention, lesson 06), with the cluster's bus bandwidth for the group (NVLink inside a node, the
  group's NICs across nodes). A real NCCL reaches 70–90 % of that bandwidth.
* **Hidden and exposed** (`replay`): compute runs in order on one stream; FSDP2 runs its all-gathers on
  one stream and its reduce-scatters on another (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py:
  `all_gather_stream`, `reduce_scatter_stream`), so a backward prefetch never queues behind a
  reduce-scatter. An all-gather may start once the unit gathered two all-gathers before it has finished
  computing (FSDP2 keeps at most two units gathered); the compute waits for the oldest all-gather it has
  not yet waited for (the unit it runs). A reduce-scatter starts when the gradients it reduces exist.
  Tensor parallelism's collectives block the compute stream (exposed). Exposed = step time − compute.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from perflab.plan.cluster import DTYPE_OF, Cluster, cluster, gpu_ids

__all__ = ["DTYPE_OF", "Cluster", "Event", "Replay", "cluster", "collective_seconds", "gpu_ids", "op_seconds",
           "replay"]

# ----------------------------------------------------------------------------- compute


def op_seconds(flops: float, nbytes: float, dtype: str, c: Cluster) -> float:
    """Roofline time of one operator: max(FLOPs ÷ peak of its dtype, bytes ÷ memory bandwidth)."""
    peak = c.peak(dtype) or c.peak("fp32") or 0.0
    compute = flops / (peak * 1e12) if flops and peak else 0.0
    return max(compute, nbytes / (c.bandwidth_gbps * 1e9))


def collective_seconds(op: str, nbytes: float, n: int, busbw_gbps: float, latency_s: float = 0.0) -> float:
    """nccl-tests' model: `latency_s` + S · factor(op, n) ÷ busbw (0 for a group of one)."""
    from perflab.distributed.busbw import bus_factor

    if n <= 1 or nbytes <= 0:
        return 0.0
    return latency_s + nbytes * bus_factor(op, n) / (busbw_gbps * 1e9)


# ----------------------------------------------------------------------------- the streams


@dataclass
class Event:
    """One thing the step did, in the order it was issued: compute (`kind='compute'`), or a collective
    (`kind` its name) on FSDP's streams (`overlap=True`) or blocking the compute (tensor parallelism's)."""

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

    def scaled(self, other: Replay, k: float) -> Replay:
        """self + k · (other − self), each figure: a replay extrapolated along a line through two (the exposed
        communication kept within [0, communication], the step at compute + exposed)."""
        compute, comm, exposed = (a + k * (b - a) for a, b in ((self.compute_s, other.compute_s),
                                                              (self.comm_s, other.comm_s),
                                                              (self.exposed_s, other.exposed_s)))
        exposed = min(max(exposed, 0.0), max(comm, 0.0))
        return Replay(compute + exposed, compute, comm, exposed)


def replay(events: list[Event]) -> Replay:
    """Play the events on the compute stream and FSDP2's all-gather and reduce-scatter streams (module
    docstring)."""
    t_compute = 0.0  # when the compute stream is free
    t_gather = 0.0  # when the all-gather stream is free
    t_reduce = 0.0  # when the reduce-scatter stream is free
    gather_end: list[float] = []  # when each all-gather (in issue order) finished
    released: dict[int, float] = {}  # all-gather index -> when the compute stopped using its unit
    pending: deque[int] = deque()  # all-gathers the compute has not waited for yet
    current: int | None = None  # the all-gather whose unit the compute runs now
    compute = comm = 0.0
    for e in events:
        if e.kind == "compute":
            if pending:  # the compute moves on to the unit of the oldest pending all-gather
                if current is not None:
                    released[current] = t_compute
                current = pending.popleft()
                t_compute = max(t_compute, gather_end[current])
            t_compute += e.seconds
            compute += e.seconds
            continue
        comm += e.seconds
        if not e.overlap:  # blocking: the compute stream waits for it, and it for the compute before it
            start = max([t_compute, *(gather_end[i] for i in pending)])
            t_compute = start + e.seconds
            continue
        if e.kind in ("reduce_scatter", "all_reduce"):
            start = max(t_reduce, t_compute)  # the gradients it reduces were just computed
            t_reduce = start + e.seconds
            continue
        # an all-gather: at most two units gathered, so it waits until the unit two all-gathers back is released
        k = len(gather_end)
        ready = released.get(k - 2, t_compute) if k >= 2 else 0.0
        start = max(t_gather, ready)
        t_gather = start + e.seconds
        gather_end.append(t_gather)
        pending.append(k)
    step = max([t_compute, t_gather, t_reduce])
    return Replay(step, compute, comm, max(0.0, step - compute))
