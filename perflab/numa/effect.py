"""What binding buys, measured: host memory bandwidth and latency from a core of one node to
memory on the same node and on another, and host→device copies from each node.

Only a machine with more than one NUMA node (with CPUs) has anything to show; on one node every
measurement returns a skip with the reason (`.skipped`; run the same calls on a two-socket server to
see the difference there).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perflab.core.jsonable import JSON, to_json
from perflab.core.readout import num
from perflab.numa.topology import Topology, format_cpulist

_PROBE = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    n = int(sys.argv[1])
    a = np.ones(n // 8)            # first touch: pages land on the node numactl chose
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter(); np.copyto(b, a); best = min(best, time.perf_counter() - t)
    idx = np.random.default_rng(0).permutation(len(a))[: 1 << 18]
    t = time.perf_counter(); s = a[idx].sum(); lat = (time.perf_counter() - t) / len(idx)
    print(json.dumps({"gbps": 2 * a.nbytes / best / 1e9, "ns_per_random_read": lat * 1e9, "check": float(s)}))
""")


def skip_reason(topo: Topology) -> str | None:
    with_cpus = [n for n in topo.nodes if n.cpus]
    if len(with_cpus) < 2:
        return (f"this machine has {len(with_cpus)} NUMA node with CPUs: there is no remote memory to compare "
                "(a 2-socket server has two: run the same measurement there)")
    if not __import__("shutil").which("numactl"):
        return "numactl is not installed (apt-get install numactl): it places the test's memory on a chosen node"
    return None


def _without_none(obj) -> JSON:
    return {k: v for k, v in to_json(obj).items() if v is not None}


@dataclass
class MemoryRow:
    """Cores of one node reading memory of one node (itself: local; another: remote)."""

    cpu_node: int
    memory_node: int
    gbps: float | None = None  # copy bandwidth, read + write, one core (GB = 1e9 bytes)
    ns_per_random_read: float | None = None  # 2^18 independent random reads, overlapped by the core
    check: float | None = None  # the sum the random reads made (keeps them from being optimised away)
    error: str | None = None  # the last line of a numactl run that failed (the figures are None then)


@dataclass
class CopyRow:
    """Pinned host→device copies into one GPU from a process bound to one node."""

    gpu: int
    gpu_node: int | None  # the GPU's own node (None: unknown)
    process_node: int
    gbps: float | None = None
    error: str | None = None


@dataclass
class LocalVsRemote:
    """`memory_local_vs_remote`'s rows, or why there are none."""

    rows: list[MemoryRow] = field(default_factory=list)
    skipped: str | None = None

    def to_json(self) -> JSON:
        """{"skipped": why} or {"rows": [...]}, each row without the figures it lacks."""
        return {"skipped": self.skipped} if self.skipped else {"rows": [_without_none(r) for r in self.rows]}

    def table(self):
        """One row per (cores' node, memory's node): copy GB/s and ns per random read, 3 digits."""
        import pandas as pd

        return pd.DataFrame([{"cores on node": r.cpu_node, "memory on node": r.memory_node,
                              "copy (GB/s, read + write)": num(r.gbps) if r.gbps is not None else "–",
                              "ns per random read": num(r.ns_per_random_read) if r.ns_per_random_read is not None else "–",
                              "error": r.error or ""} for r in self.rows])


@dataclass
class HostToDevice:
    """`host_to_device_by_node`'s rows, or why there are none."""

    rows: list[CopyRow] = field(default_factory=list)
    skipped: str | None = None

    def to_json(self) -> JSON:
        """{"skipped": why} or {"rows": [...]}, each row without the figures it lacks."""
        return {"skipped": self.skipped} if self.skipped else {"rows": [_without_none(r) for r in self.rows]}

    def table(self):
        """One row per process node: pinned host→device GB/s into the GPU, 3 digits."""
        import pandas as pd

        return pd.DataFrame([{"GPU": r.gpu, "GPU's node": "unknown" if r.gpu_node is None else r.gpu_node,
                              "process on node": r.process_node, "host→device (GB/s)": num(r.gbps) if r.gbps else "–",
                              "error": r.error or ""} for r in self.rows])


@dataclass
class Effect:
    """Section 4's two measurements on this machine: memory local vs remote, host→device by node."""

    memory: LocalVsRemote
    copies: HostToDevice

    def text(self) -> str:
        """What was measured, or why not, one line each."""
        return "\n".join((f"memory, local vs remote: {self.memory.skipped or 'measured (table below)'}",
                          f"host→device by node: {self.copies.skipped or 'measured (table below)'}"))

    def tables(self) -> list[Any]:
        """The measured tables (none on a machine with one node)."""
        return [t.table() for t in (self.memory, self.copies) if t.skipped is None]

    def latency_ratio(self, published: Any) -> tuple[float | None, str | None, str | None]:
        """(remote ÷ local latency, what it is checked against, the hardware): this machine's where it has
        two nodes, else the published matrix's (`published`: a figure with `.values` and `.hardware`)."""
        here = remote_over_local(self.memory.rows, "ns_per_random_read")
        if here is not None:
            return here, None, None
        return remote_over_local(published.values, "value"), "published (Intel MLC)", published.hardware


def measure(topo: Topology, nbytes: int) -> Effect:
    """`memory_local_vs_remote(topo, nbytes)` and `host_to_device_by_node(topo)`."""
    return Effect(memory_local_vs_remote(topo, nbytes), host_to_device_by_node(topo))


def published_ratios_text(latency: Sequence[Mapping[str, Any]], bandwidth: Sequence[Mapping[str, Any]]) -> str:
    """The published matrices' remote ÷ local ratios in one line."""
    lat, bw = remote_over_local(latency, "value"), remote_over_local(bandwidth, "value")
    return f"published, remote / local: latency {num(lat)}×, read bandwidth {num(bw, 2)}×"


def memory_local_vs_remote(topo: Topology, nbytes: int = 512 * 2**20) -> LocalVsRemote:
    """Copy bandwidth (GB/s, read + write) and random-read latency (ns) from the first CPU of node
    0 to memory on each node, each in its own `numactl --physcpubind --membind` process.
    Says why in `.skipped` where the machine cannot show it."""
    reason = skip_reason(topo)
    if reason:
        return LocalVsRemote(skipped=reason)
    import json

    cpu_node = next(n for n in topo.nodes if n.cpus)
    rows = []
    for mem in topo.nodes:
        cmd = ["numactl", f"--physcpubind={format_cpulist(cpu_node.cpus[:1])}", f"--membind={mem.id}",
               sys.executable, "-c", _PROBE, str(nbytes)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if r.returncode != 0:
            rows.append(MemoryRow(cpu_node.id, mem.id, error=(r.stderr.strip().splitlines() or ["?"])[-1]))
            continue
        got = json.loads(r.stdout)
        rows.append(MemoryRow(cpu_node.id, mem.id, got["gbps"], got["ns_per_random_read"], got["check"]))
    return LocalVsRemote(rows)


def host_to_device_by_node(topo: Topology, gpu: int = 0, nbytes: int = 256 * 2**20) -> HostToDevice:
    """Pinned host→device GB/s into GPU `gpu` from a process bound to each node in turn (CPUs and
    memory). Needs a CUDA GPU and more than one node; else `.skipped` says why."""
    reason = skip_reason(topo)
    try:
        import torch

        if not torch.cuda.is_available():
            reason = reason or "no CUDA GPU here: host→device copies need one"
    except ImportError:
        reason = reason or "torch is not installed"
    if reason:
        return HostToDevice(skipped=reason)
    import json

    code = ("import json, sys, torch; from perflab.core.measure import measure_host_to_device; "
            f"r = measure_host_to_device({int(nbytes)}, pinned=True, device='cuda:{int(gpu)}'); "
            "print(json.dumps({'gbps': r.gbps}))")
    rows = []
    for node in (n for n in topo.nodes if n.cpus):
        cmd = ["numactl", f"--cpunodebind={node.id}", f"--membind={node.id}", sys.executable, "-c", code]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        local = next((g.numa_node for g in topo.gpus if g.index == gpu), None)
        row = CopyRow(gpu, local, node.id)
        if r.returncode == 0:
            row.gbps = float(json.loads(r.stdout.strip().splitlines()[-1])["gbps"])
        else:
            row.error = (r.stderr.strip().splitlines() or ["?"])[-1]
        rows.append(row)
    return HostToDevice(rows)


def remote_over_local(rows: Sequence[MemoryRow | Mapping[str, Any]], key: str) -> float | None:
    """Mean of `key` over the remote rows (memory on another node than the cores) divided by its
    mean over the local rows: above 1 for latency, below 1 for bandwidth on a two-socket server.

    Rows are the `MemoryRow`s of `memory_local_vs_remote` (key "gbps" or "ns_per_random_read"), or
    the cells of a published matrix: mappings with "cpu_node", "memory_node" and `key`. Rows that
    failed or lack `key` are left out; None when no local or no remote row is left."""
    local, remote = [], []
    for r in rows:
        cell = r if isinstance(r, Mapping) else to_json(r)
        v = cell.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or cell.get("cpu_node") is None \
                or cell.get("memory_node") is None:
            continue
        (local if cell["cpu_node"] == cell["memory_node"] else remote).append(float(v))
    if not local or not remote or sum(local) == 0:
        return None
    return (sum(remote) / len(remote)) / (sum(local) / len(local))


def measured_tables(rows: Sequence[MemoryRow]) -> tuple[dict[str, str], dict[str, str]]:
    """The rows of `memory_local_vs_remote` as two label -> text tables (latency, bandwidth), to
    show beside the published matrices; failed rows say why. Empty tables when nothing was measured.

    The latency here is the time per read of 2^18 independent random reads, which the core overlaps:
    lower than a pointer chase's latency (Intel MLC's), so compare the ratios, not the ns."""
    lat: dict[str, str] = {}
    bw: dict[str, str] = {}
    for r in rows:
        where = "local" if r.cpu_node == r.memory_node else "remote"
        label = f"cores on node {r.cpu_node}, memory on node {r.memory_node} ({where})"
        if r.error is not None or r.gbps is None or r.ns_per_random_read is None:
            lat[label] = bw[label] = f"failed: {r.error}"
            continue
        lat[label] = f"{num(r.ns_per_random_read, 2)} ns per independent random read"
        bw[label] = f"{num(r.gbps, 2)} GB/s copy (read + write), one core"
    return lat, bw
