"""This machine's NUMA topology, read from sysfs: nodes with their CPUs, memory and distances,
SMT siblings, the GPUs' nodes and local CPUs, and the process's affinity.

Every reader takes `root`, the folder that stands for `/sys`, so the tests run them on fake
trees (one node; two nodes with eight GPUs; a node with no CPUs; offline CPUs; `numa_node = -1`):

    ROOT/devices/system/node/nodeN/{cpulist, distance, meminfo}
    ROOT/devices/system/cpu/{online, cpuN/topology/thread_siblings_list}
    ROOT/bus/pci/devices/<bus id>/{class, vendor, numa_node, local_cpulist}

A kernel without NUMA support has no node folders: then the machine is one node holding every
online CPU. NVML, where present, names the GPUs' bus ids in CUDA's order (`nvml_gpus`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, to_json

# PCI class codes of display controllers (VGA 0x0300, 3D 0x0302) and the vendors whose are GPUs here
GPU_CLASSES = ("0x0300", "0x0302")
GPU_VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel"}


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' → [0, 1, 2, 3, 8, 10, 11] (the kernel's and nvidia-smi's list format; empty
    text → []). Raises InputError on anything else."""
    text = (text or "").strip()
    if not text or text.upper() in ("N/A", "NONE"):
        return []
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?(?::(\d+))?", part)
        if not m:
            raise InputError(f"not a CPU list: {text!r} (expected e.g. 0-3,8,10-11)")
        a = int(m.group(1))
        b = int(m.group(2)) if m.group(2) else a
        step = int(m.group(3)) if m.group(3) else 1
        if b < a:
            raise InputError(f"not a CPU list: {text!r} (range {a}-{b} runs backwards)")
        out.extend(range(a, b + 1, step))
    return sorted(set(out))


def format_cpulist(cpus) -> str:
    """[0, 1, 2, 3, 8] → '0-3,8' (empty → '')."""
    cpus = sorted(set(cpus))
    parts, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass
class Node:
    id: int
    cpus: list[int]  # online CPUs of this node
    memory_bytes: int | None  # MemTotal from the node's meminfo


@dataclass
class GPU:
    index: int  # order here: NVML's (CUDA's PCI order) when known, else sorted bus ids
    bus_id: str
    numa_node: int | None  # None: the kernel does not know (numa_node = -1)
    cpus: list[int]  # the PCI device's local CPUs
    vendor: str = ""


@dataclass
class Topology:
    nodes: list[Node]
    distances: list[list[int]]
    gpus: list[GPU]
    affinity: list[int]  # this process's allowed CPUs (os.sched_getaffinity(0))
    siblings: dict[int, list[int]] = field(default_factory=dict)  # cpu → its SMT group (itself included)
    source: str = "sysfs"
    notes: list[str] = field(default_factory=list)  # caveats a reader must see (a guessed SMT layout)
    # nodes whose CPUs the source does not give (a table's blank CPU Affinity cells): not memory-only
    unknown_cpus: list[int] = field(default_factory=list)

    JSON_SKIP = ("siblings",)

    def as_dict(self) -> JSON:
        """The topology as JSON (the SMT siblings left out)."""
        return to_json(self)

    def node_of(self, cpu: int) -> int | None:
        return next((n.id for n in self.nodes if cpu in n.cpus), None)

    def nodes_table(self):
        """One row per node: its CPUs (as a list), how many, and its memory in GiB."""
        import pandas as pd

        return pd.DataFrame([{"node": n.id, "CPUs": format_cpulist(n.cpus), "count": len(n.cpus),
                              "memory": f"{n.memory_bytes / 2**30:.1f} GiB" if n.memory_bytes else "not reported"}
                             for n in self.nodes]).set_index("node")

    def describe(self) -> str:
        """The distances, the GPUs (index, bus id, node, local CPUs) and this process's CPUs, one line each."""
        gpus = [(g.index, g.bus_id, g.numa_node, format_cpulist(g.cpus)) for g in self.gpus]
        return (f"distances: {self.distances}\nGPUs: {gpus or 'none on the PCI bus'}\n"
                f"this process may run on CPUs {format_cpulist(self.affinity)}")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def online_cpus(root: str | Path = "/sys") -> list[int]:
    """The online CPUs (`devices/system/cpu/online`); without that file, os.cpu_count()'s range."""
    text = _read(Path(root) / "devices/system/cpu/online")
    if text is None:
        return list(range(os.cpu_count() or 1))
    return parse_cpulist(text)


def smt_siblings(root: str | Path = "/sys", cpus: list[int] | None = None) -> dict[int, list[int]]:
    """cpu → the hardware threads of its core (`thread_siblings_list`); a CPU without the file is
    its own core."""
    cpus = online_cpus(root) if cpus is None else cpus
    out = {}
    for c in cpus:
        text = _read(Path(root) / f"devices/system/cpu/cpu{c}/topology/thread_siblings_list")
        out[c] = parse_cpulist(text) if text else [c]
    return out


def read_nodes(root: str | Path = "/sys") -> tuple[list[Node], list[list[int]]]:
    """NUMA nodes (online CPUs only) and the distance matrix (10 = local, as the kernel reports)."""
    base = Path(root) / "devices/system/node"
    online = set(online_cpus(root))
    dirs = sorted((d for d in base.glob("node[0-9]*") if d.is_dir()), key=lambda d: int(d.name[4:])) if base.is_dir() else []
    if not dirs:
        return [Node(0, sorted(online), None)], [[10]]
    nodes, dist = [], []
    for d in dirs:
        nid = int(d.name[4:])
        cpus = [c for c in parse_cpulist(_read(d / "cpulist") or "") if c in online]
        mem = None
        m = re.search(r"MemTotal:\s+(\d+)\s*kB", _read(d / "meminfo") or "")
        if m:
            mem = int(m.group(1)) * 1024
        nodes.append(Node(nid, cpus, mem))
        row = (_read(d / "distance") or "").split()
        dist.append([int(x) for x in row] if row else [])
    n = len(nodes)
    if any(len(r) != n for r in dist):  # missing distance files: local 10, remote 20 (the kernel's default)
        dist = [[10 if i == j else 20 for j in range(n)] for i in range(n)]
    return nodes, dist


def pci_gpus(root: str | Path = "/sys") -> list[GPU]:
    """GPUs on the PCI bus with their NUMA node and local CPUs (`numa_node` -1 → None)."""
    base = Path(root) / "bus/pci/devices"
    out = []
    for d in sorted(base.iterdir()) if base.is_dir() else []:
        cls, vendor = (_read(d / "class") or ""), (_read(d / "vendor") or "").lower()
        if not cls.lower().startswith(GPU_CLASSES) or vendor not in GPU_VENDORS:
            continue
        node = _read(d / "numa_node")
        node_id = int(node) if node and node.lstrip("-").isdigit() and int(node) >= 0 else None
        out.append(GPU(len(out), d.name, node_id, parse_cpulist(_read(d / "local_cpulist") or ""), GPU_VENDORS[vendor]))
    return out


def nvml_gpus() -> list[tuple[int, str]] | None:
    """(CUDA index, PCI bus id) for each NVIDIA GPU from NVML, or None without NVML or GPUs."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library, no driver: not an NVIDIA machine
        return None
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            bus = pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).busId
            bus = bus.decode() if isinstance(bus, bytes) else bus
            out.append((i, bus.lower()))
        return out or None
    except Exception:  # noqa: BLE001
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _bus_key(bus: str) -> str:
    # NVML says 00000000:18:00.0, sysfs 0000:18:00.0: compare the last 12 characters (bus:dev.fn + domain tail)
    return bus.lower()[-12:]


def read_topology(root: str | Path = "/sys", *, use_nvml: bool | None = None) -> Topology:
    """Everything above in one object. NVML orders the GPUs as CUDA does when it is available and
    `root` is the real /sys (use_nvml=None decides so); otherwise they come in bus-id order."""
    nodes, dist = read_nodes(root)
    gpus = pci_gpus(root)
    real = Path(root).resolve() == Path("/sys").resolve()
    if use_nvml or (use_nvml is None and real):
        order = nvml_gpus()
        if order:
            by_bus = {_bus_key(g.bus_id): g for g in gpus}
            ordered = []
            for idx, bus in order:
                g = by_bus.get(_bus_key(bus))
                if g is not None:
                    ordered.append(GPU(idx, g.bus_id, g.numa_node, g.cpus, g.vendor))
            gpus = ordered or gpus
    cpus = sorted(c for n in nodes for c in n.cpus)
    return Topology(nodes, dist, gpus, sorted(os.sched_getaffinity(0)), smt_siblings(root, cpus), source=f"sysfs at {root}")
