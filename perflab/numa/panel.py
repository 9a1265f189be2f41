"""Lesson 08's panel and notes: pick a topology and a rank count, see the plan and the rank map.

    >>> server = published()                          # the handbook's 8×H100 server: .text(), .table(), .topology
    >>> topos = topologies()                          # this machine + the published 8×H100 server
    >>> table, fig = plan_view(topos, "this machine", 2)
    >>> print(memory_note(topos["this machine"]))     # node memory (sysfs) vs MemTotal (/proc)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.core.jsonable import package_json
from perflab.numa import plan, plots, smi_topo, topology
from perflab.numa.topology import Topology

SERVER = "8×H100 server, 2 sockets (published table)"
HERE = "this machine"


@dataclass(frozen=True)
class PublishedServer:
    """The 8×H100 server's `nvidia-smi topo -m` as the handbook prints it: what it is, its source, the
    parsed table and the topology read from it."""

    what: str
    source: str
    parsed: smi_topo.TopoTable
    topology: Topology

    def text(self) -> str:
        return f"{self.what}\nsource: {self.source}"

    def table(self):
        """One row per GPU: CPU affinity, NUMA node, link to GPU0."""
        return self.parsed.table()


def published() -> PublishedServer:
    """The 8×H100 server of `data/published_topologies.json` (nvidia-smi topo -m, with its source)."""
    data = package_json("perflab.numa", "published_topologies.json")
    entry = data["h100_8gpu_2socket"]
    parsed = smi_topo.parse_topo(entry["table"])
    return PublishedServer(entry["what"], entry["source"], parsed, smi_topo.topology_from_topo(parsed))


def published_server() -> Topology:
    """The 8×H100 server's topology (`published().topology`)."""
    return published().topology


def topologies() -> dict[str, Topology]:
    return {HERE: topology.read_topology(), SERVER: published_server()}


def plan_view(topos: dict[str, Topology], which: str, ranks: int) -> tuple[Any, Any]:
    """(plan table, rank map figure) of `ranks` local ranks on topology `which`."""
    topo = topos[which]
    p = plan.plan(ranks, topo)
    fig = plots.draw_topology(topo, p, title=f"{which}: {ranks} rank{'s' if ranks != 1 else ''}")
    return plan.plan_table(p), fig


def proc_memtotal_bytes(path: str | Path = "/proc/meminfo") -> int | None:
    """MemTotal of /proc/meminfo in bytes (None if unreadable)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_note(topo: Topology, proc_path: str | Path = "/proc/meminfo") -> str:
    """Why the nodes' memory (sysfs nodeN/meminfo) may not add up to the machine's (/proc/meminfo)."""
    nodes = sum(n.memory_bytes or 0 for n in topo.nodes)
    total = proc_memtotal_bytes(proc_path)
    if not nodes or total is None:
        return "node memory or /proc/meminfo could not be read here"
    gib = 2**30
    head = (f"the nodes' MemTotal (sysfs nodeN/meminfo) adds up to {nodes / gib:.1f} GiB; /proc/meminfo's "
            f"MemTotal is {total / gib:.1f} GiB")
    if abs(nodes - total) <= 0.02 * total:
        return head + ": they agree, as on a physical machine, where each node counts its own share of RAM."
    return (head + ". They differ: both count usable RAM, but they are two separate counters, and inside a "
            "virtual machine, container or sandbox either can be virtualised, so they need not agree. On a physical "
            "machine the nodes' MemTotal add up to /proc/meminfo's.")
