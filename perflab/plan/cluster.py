"""The cluster a plan runs on: the GPU, its nodes, and what a collective costs across them.

* **The GPU**: its dense peaks (`perflab.core.hardware.spec_peak`), memory and memory bandwidth from
  perflab's hardware table (perflab/core/data/accelerators.json, each figure with its datasheet).
* **The node** (perflab/plan/data/clusters.json): 8 GPUs joined by NVLink (or PCIe), and one network
  card (NIC) per GPU, as DGX/HGX systems are built; the links' per-direction bandwidths are lesson 06's
  table (perflab/distributed/data/interconnects.json). `--gpus-per-node`, `--nics-per-node` and `--nic`
  describe another cluster.
* **Bus bandwidth** (`busbw_gbps`): inside a node, the NVLink (or PCIe) bandwidth per direction. A group
  that spans nodes runs NCCL's rings over every NIC its GPUs sit by: NCCL gives a ring per channel and
  spreads the channels over the node's NICs, busBw = channels × per-channel bandwidth
  (NVIDIA/nccl src/graph/tuning.cc, `ncclTopoTuneModel`). So the bus bandwidth across nodes is the
  group's GPUs per node (at most the NICs per node) × one NIC's bandwidth, capped by the intra-node
  link the traffic also crosses. A DGX-A100 with 8 × 200 Gb/s HDR cards: 8 × 25 = 200 GB/s, where an
  NCCL maintainer measured 192 GB/s all-reduce busbw (NVIDIA/nccl issue 812). A data-parallel group
  whose ranks are `t` apart (tensor parallelism inside each node) has 8/t GPUs per node, so 8/t NICs.
* **Latency** (`latency_s`): NCCL's own model for a ring with the Simple protocol: a base of 8.4 µs, and
  each of the ring's steps (2(n − 1) for an all-reduce, n − 1 for an all-gather or reduce-scatter) 3.4 µs
  over NVLink, 5.7 µs over PCIe, 14 µs over the network (the steps that cross nodes: 2(nodes − 1) or
  nodes − 1) — tuning.cc's `ncclTunerConstantsDefaults` and `ncclTopoTuneModel`, at the commit the data
  file names. It grows with the group: 63 steps of a 64-rank all-gather cost about 0.3 ms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from perflab.core.errors import InputError
from perflab.core.hardware import DTYPE_KEYS, AcceleratorSpec, spec_peak
from perflab.core.jsonable import JSON, package_json

DTYPE_OF = {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float64": "fp64"}


@lru_cache(maxsize=1)
def _clusters() -> JSON:
    return package_json("perflab.plan", "clusters.json")


@dataclass(frozen=True)
class Cluster:
    """The GPU, its links, and how the nodes are built."""

    gpu_id: str
    gpu_name: str
    spec: AcceleratorSpec  # the GPU's record of the hardware table: its peaks come from there
    memory_bytes: float
    bandwidth_gbps: float
    intra_id: str
    intra_gbps: float  # the link inside a node, per direction
    inter_id: str  # the network card
    inter_gbps: float  # one network card, per direction
    gpus_per_node: int
    sources: tuple[str, ...]
    nics_per_node: int = 8
    intra_is_nvlink: bool = True

    def peak(self, dtype: str) -> float | None:
        """The GPU's dense peak TFLOP/s for `dtype` (`perflab.core.hardware.spec_peak`), None: no such mode."""
        return spec_peak(self.spec, dtype).tflops

    def peak_source(self, dtype: str) -> str:
        return spec_peak(self.spec, dtype).source

    def per_node(self, group_size: int, stride: int = 1) -> int:
        """How many ranks of a group of `group_size`, `stride` ranks apart, share one node."""
        return max(1, min(group_size, self.gpus_per_node // max(stride, 1)))

    def nodes(self, group_size: int, stride: int = 1) -> int:
        """How many nodes a group of `group_size` ranks, `stride` apart, spans."""
        return math.ceil(group_size / self.per_node(group_size, stride))

    def busbw_gbps(self, group_size: int, stride: int = 1) -> float:
        """The bus bandwidth of a group of `group_size` ranks, `stride` ranks apart (module docstring): the
        intra-node link when the group fits in one node, else its GPUs per node (at most the NICs) × one
        NIC, capped by the intra-node link."""
        if group_size * stride <= self.gpus_per_node:
            return self.intra_gbps
        nics = min(self.per_node(group_size, stride), self.nics_per_node)
        return min(nics * self.inter_gbps, self.intra_gbps)

    def latency_s(self, op: str, group_size: int, stride: int = 1) -> float:
        """NCCL's ring latency for `op` on a group of `group_size` ranks, `stride` apart (module docstring)."""
        if group_size <= 1:
            return 0.0
        c = _clusters()["nccl"]
        steps = 2 * (group_size - 1) if op == "all_reduce" else group_size if op == "all_to_all" else group_size - 1
        nodes = self.nodes(group_size, stride)
        inter = 0 if nodes == 1 else 2 * (nodes - 1) if op == "all_reduce" else nodes - 1
        intra = c["nvlink_step_us"] if self.intra_is_nvlink else c["pci_step_us"]
        if nodes > 1:
            intra = max(intra, c["net_overhead_us"])
        return (c["base_us"] + (steps - inter) * intra + inter * c["net_step_us"]) * 1e-6

    def describe(self) -> str:
        """The cluster in one line, for a plan's header."""
        return (f"{self.gpus_per_node} GPUs per node on {self.intra_id} ({self.intra_gbps:g} GB/s per direction), "
                f"{self.nics_per_node} × {self.inter_id} ({self.inter_gbps:g} GB/s) per node between nodes")

    def as_dict(self) -> JSON:
        """The cluster for `perflab plan --json`."""
        return {"gpu": self.gpu_id, "name": self.gpu_name, "memory_gb": self.memory_bytes / 1e9,
                "bandwidth_gbps": self.bandwidth_gbps, "peak_tflops": {d: self.peak(d) for d in DTYPE_KEYS},
                "intra_link": self.intra_id, "intra_gbps": self.intra_gbps, "inter_link": self.inter_id,
                "inter_gbps": self.inter_gbps, "gpus_per_node": self.gpus_per_node,
                "nics_per_node": self.nics_per_node, "sources": list(self.sources)}


def gpu_ids() -> list[str]:
    """The GPUs `--gpu` takes: the ids with links in clusters.json, the variants of published runs, and the
    short names that lead to one."""
    data = _clusters()
    variants = sorted(k for k in data["variants"] if not k.startswith("_"))
    return sorted(data["links"]) + variants + sorted(k for k, v in data["aliases"].items() if v in data["links"])


def cluster(gpu: str, *, gpus_per_node: int | None = None, nics_per_node: int | None = None,
            nic: str | float | None = None) -> Cluster:
    """The cluster for `--gpu`: an accelerator id of the hardware table or a short name (h100, a100, ...),
    with its nodes as clusters.json builds them, or as `gpus_per_node`, `nics_per_node` and `nic` (a link
    id of lesson 06's table, or a NIC's bandwidth in GB/s per direction) say."""
    from perflab.core.hardware import by_id
    from perflab.distributed.overlap import link

    data = _clusters()
    key = str(gpu).strip().lower()
    gid = data["aliases"].get(key, key)
    variant = data["variants"].get(gid) if not gid.startswith("_") else None
    base = variant["of"] if variant else gid
    if base not in data["links"]:
        raise InputError(f"--gpu {gpu!r} is not a GPU perflab can plan for: use one of {', '.join(gpu_ids())}")
    spec = by_id(base)
    if not spec.memory_gb or not spec.memory_bandwidth_gbps:
        raise InputError(f"the hardware table gives no memory size or bandwidth for {spec.name}")
    lk = data["links"][base]
    intra, card = link(lk["intra"]), link(lk["nic"])
    memory_gb, bandwidth = spec.memory_gb, spec.memory_bandwidth_gbps
    name, extra = spec.name, []
    if variant:
        memory_gb, bandwidth, name, extra = variant["memory_gb"], variant["memory_bandwidth_gbps"], variant["name"], \
            [variant["source"]]
    sources = tuple(dict.fromkeys([*extra, *spec.sources.values(), intra.source, card.source,
                                   *data["sources"].values(), data["nccl"]["_about"]]))
    c = Cluster(gid, name, spec, memory_gb * 1e9, bandwidth, intra.id, intra.per_direction_gbps, card.id,
                card.per_direction_gbps, int(lk["gpus_per_node"]), sources, int(lk["nics_per_node"]),
                intra.id.startswith("nvlink"))
    return with_nodes(c, gpus_per_node=gpus_per_node, nics_per_node=nics_per_node, nic=nic)


def with_nodes(c: Cluster, *, gpus_per_node: int | None = None, nics_per_node: int | None = None,
               nic: str | float | None = None) -> Cluster:
    """`c` with other nodes: GPUs per node, NICs per node, the NIC (a link id, or GB/s per direction)."""
    from perflab.distributed.overlap import link

    for name, v in (("--gpus-per-node", gpus_per_node), ("--nics-per-node", nics_per_node)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise InputError(f"{name} must be a whole number ≥ 1 (got {v!r})")
    out = c
    if gpus_per_node is not None:
        out = replace(out, gpus_per_node=gpus_per_node)
    if nics_per_node is not None:
        out = replace(out, nics_per_node=nics_per_node)
    if nic is not None:
        try:
            gbps = float(nic)
        except (TypeError, ValueError):
            card = link(str(nic))
            if card.scope != "inter-node":
                raise InputError(f"--nic {nic!r} is a link inside a node: give a network card (ib-ndr-400, "
                                 "ib-hdr-200) or its GB/s per direction") from None
            return replace(out, inter_id=card.id, inter_gbps=card.per_direction_gbps,
                           sources=tuple(dict.fromkeys([*out.sources, card.source])))
        if not (math.isfinite(gbps) and gbps > 0):
            raise InputError(f"--nic must be a network card's id or its GB/s per direction, > 0 (got {nic!r})")
        out = replace(out, inter_id=f"a {gbps:g} GB/s NIC", inter_gbps=gbps)
    return out
