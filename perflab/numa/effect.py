"""What binding buys, measured: host memory bandwidth and latency from a core of one node to
memory on the same node and on another, and host→device copies from each node.

Only a machine with more than one NUMA node (with CPUs) has anything to show; on one node every
function returns a skip with the reason (run the same calls on a two-socket server to see the
difference there).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

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


def memory_local_vs_remote(topo: Topology, nbytes: int = 512 * 2**20) -> dict[str, Any]:
    """Copy bandwidth (GB/s, read + write) and random-read latency (ns) from the first CPU of node
    0 to memory on each node, each in its own `numactl --physcpubind --membind` process.
    Returns {"skipped": reason} where the machine cannot show it."""
    reason = skip_reason(topo)
    if reason:
        return {"skipped": reason}
    import json

    cpu_node = next(n for n in topo.nodes if n.cpus)
    rows = []
    for mem in topo.nodes:
        cmd = ["numactl", f"--physcpubind={format_cpulist(cpu_node.cpus[:1])}", f"--membind={mem.id}",
               sys.executable, "-c", _PROBE, str(nbytes)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if r.returncode != 0:
            rows.append({"cpu_node": cpu_node.id, "memory_node": mem.id, "error": (r.stderr.strip().splitlines() or ["?"])[-1]})
            continue
        rows.append({"cpu_node": cpu_node.id, "memory_node": mem.id, **json.loads(r.stdout)})
    return {"rows": rows}


def host_to_device_by_node(topo: Topology, gpu: int = 0, nbytes: int = 256 * 2**20) -> dict[str, Any]:
    """Pinned host→device GB/s into GPU `gpu` from a process bound to each node in turn (CPUs and
    memory). Needs a CUDA GPU and more than one node; else {"skipped": reason}."""
    reason = skip_reason(topo)
    try:
        import torch

        if not torch.cuda.is_available():
            reason = reason or "no CUDA GPU here: host→device copies need one"
    except ImportError:
        reason = reason or "torch is not installed"
    if reason:
        return {"skipped": reason}
    import json

    code = ("import json, sys, torch; from perflab.core.measure import measure_host_to_device; "
            f"r = measure_host_to_device({int(nbytes)}, pinned=True, device='cuda:{int(gpu)}'); "
            "print(json.dumps({'gbps': r.gbps}))")
    rows = []
    for node in (n for n in topo.nodes if n.cpus):
        cmd = ["numactl", f"--cpunodebind={node.id}", f"--membind={node.id}", sys.executable, "-c", code]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        local = next((g.numa_node for g in topo.gpus if g.index == gpu), None)
        row = {"gpu": gpu, "gpu_node": local, "process_node": node.id}
        if r.returncode == 0:
            row.update(json.loads(r.stdout.strip().splitlines()[-1]))
        else:
            row["error"] = (r.stderr.strip().splitlines() or ["?"])[-1]
        rows.append(row)
    return {"rows": rows}


def remote_over_local(rows: list[dict[str, Any]], key: str) -> float | None:
    """Mean of `key` over the remote rows (memory on another node than the cores) divided by its
    mean over the local rows: above 1 for latency, below 1 for bandwidth on a two-socket server.

    Rows are those of `memory_local_vs_remote` (key "gbps" or "ns_per_random_read"), or any rows
    with "cpu_node", "memory_node" and `key` (a published matrix). Rows that failed or lack `key`
    are left out; None when no local or no remote row is left."""
    local, remote = [], []
    for r in rows:
        v = r.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or "cpu_node" not in r or "memory_node" not in r:
            continue
        (local if r["cpu_node"] == r["memory_node"] else remote).append(float(v))
    if not local or not remote or sum(local) == 0:
        return None
    return (sum(remote) / len(remote)) / (sum(local) / len(local))


def measured_tables(rows: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, str]]:
    """The rows of `memory_local_vs_remote` as two label -> text tables (latency, bandwidth), to
    show beside the published matrices; failed rows say why. Empty tables when nothing was measured.

    The latency here is the time per read of 2^18 independent random reads, which the core overlaps:
    lower than a pointer chase's latency (Intel MLC's), so compare the ratios, not the ns."""
    lat: dict[str, str] = {}
    bw: dict[str, str] = {}
    for r in rows:
        where = "local" if r.get("cpu_node") == r.get("memory_node") else "remote"
        label = f"cores on node {r.get('cpu_node')}, memory on node {r.get('memory_node')} ({where})"
        if "error" in r:
            lat[label] = bw[label] = f"failed: {r['error']}"
            continue
        lat[label] = f"{num(r['ns_per_random_read'], 2)} ns per independent random read"
        bw[label] = f"{num(r['gbps'], 2)} GB/s copy (read + write), one core"
    return lat, bw
