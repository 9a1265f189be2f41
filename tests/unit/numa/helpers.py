"""Helpers the tests of this folder share."""

import os
from pathlib import Path

from perflab.numa.topology import Node, Topology, format_cpulist, parse_cpulist


def _two_nodes() -> Topology:
    cpus = sorted(os.sched_getaffinity(0))
    return Topology(nodes=[Node(0, cpus[:1], 2**30), Node(1, cpus[1:] or cpus[:1], 2**30)],
                    distances=[[10, 21], [21, 10]], gpus=[], affinity=cpus)


CORPUS = Path(__file__).resolve().parents[2] / "corpus"


TOPO = CORPUS / "topo"


def fake_sysfs(root: Path, nodes: dict[int, str], *, online: str | None = None, smt: dict[int, str] | None = None,
               gpus: list[tuple[str, int, str]] = (), mem_kb: int = 64 * 2**20, distances: list[list[int]] | None = None):
    """A /sys stand-in: nodes {id: cpulist}, GPUs [(bus id, numa_node, local_cpulist)]."""
    all_cpus = sorted({c for v in nodes.values() for c in parse_cpulist(v)})
    (root / "devices/system/cpu").mkdir(parents=True)
    (root / "devices/system/cpu/online").write_text((online or format_cpulist(all_cpus)) + "\n")
    for c in all_cpus:
        d = root / f"devices/system/cpu/cpu{c}/topology"
        d.mkdir(parents=True)
        d.joinpath("thread_siblings_list").write_text(((smt or {}).get(c) or str(c)) + "\n")
    for i, (nid, cpus) in enumerate(sorted(nodes.items())):
        d = root / f"devices/system/node/node{nid}"
        d.mkdir(parents=True)
        d.joinpath("cpulist").write_text(cpus + "\n")
        d.joinpath("meminfo").write_text(f"Node {nid} MemTotal:       {mem_kb} kB\nNode {nid} MemFree: 1 kB\n")
        row = distances[i] if distances else [10 if j == i else 21 for j in range(len(nodes))]
        d.joinpath("distance").write_text(" ".join(map(str, row)) + "\n")
    for bus, node, local in gpus:
        d = root / f"bus/pci/devices/{bus}"
        d.mkdir(parents=True)
        d.joinpath("class").write_text("0x030200\n")
        d.joinpath("vendor").write_text("0x10de\n")
        d.joinpath("numa_node").write_text(f"{node}\n")
        d.joinpath("local_cpulist").write_text(local + "\n")
    nic = root / "bus/pci/devices/0000:c1:00.0"  # a NIC: not a GPU
    nic.mkdir(parents=True)
    nic.joinpath("class").write_text("0x020000\n")
    nic.joinpath("vendor").write_text("0x15b3\n")
    return root


SMI_4 = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV4\tNV4\tSYS\tPIX\t0-15\t0\t\tN/A
GPU1\tNV4\t X \tNV4\tSYS\tPIX\t0-15\t0\t\tN/A
GPU2\tNV4\tNV4\t X \tNV4\tSYS\t16-31\t1\t\tN/A
GPU3\tSYS\tSYS\tNV4\t X \tSYS\tN/A\tN/A\t\tN/A
NIC0\tPIX\tPIX\tSYS\tSYS\t X

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
"""
