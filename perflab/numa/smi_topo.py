"""`nvidia-smi topo -m`, parsed: the GPU×GPU link matrix, each GPU's CPU and NUMA affinity, the
NIC rows and the legend.

    GPU0    GPU1    ...  CPU Affinity    NUMA Affinity    GPU NUMA ID
    GPU0     X      NV18 ...  0-51,104-155    0               N/A

Links: X (self), NV# (a bonded set of # NVLinks), PIX (at most one PCIe bridge), PXB (several
PCIe bridges), PHB (through a PCIe host bridge, i.e. the CPU), NODE (across host bridges within
one NUMA node), SYS (across the CPUs' interconnect, QPI/UPI/Infinity Fabric: another node).
"""

from __future__ import annotations

import re
from typing import Any

from perflab.core.errors import InputError
from perflab.numa.topology import GPU, Node, Topology, parse_cpulist

LINK_MEANING = {
    "X": "self",
    "NV#": "a bonded set of # NVLinks",
    "PIX": "at most one PCIe bridge",
    "PXB": "several PCIe bridges, without the host bridge",
    "PHB": "a PCIe host bridge (through the CPU)",
    "NODE": "PCIe and the interconnect between host bridges within one NUMA node",
    "SYS": "PCIe and the SMP interconnect between NUMA nodes (QPI/UPI/Infinity Fabric)",
}
# fastest first, for ranking pairs
LINK_ORDER = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")


def _split_header(line: str) -> list[str]:
    return [c for c in re.split(r"\t+| {2,}", line.strip()) if c]


def parse_topo(text: str) -> dict[str, Any]:
    """Parse the text of `nvidia-smi topo -m`. Returns {"devices", "links" (row → column → link),
    "gpus": [{"gpu", "cpu_affinity", "numa_node"}], "nics", "legend", "nic_names"}; CPU lists are
    lists of ints, a NUMA node "N/A" is None. Raises InputError naming what is missing."""
    lines = [ln.rstrip("\n") for ln in (text or "").splitlines()]
    head_i = next((i for i, ln in enumerate(lines) if re.match(r"^\s+GPU0\b", ln) or re.match(r"^\s*GPU0\s+GPU1", ln)), None)
    if head_i is None:
        head_i = next((i for i, ln in enumerate(lines) if re.search(r"\bGPU0\b", ln) and not ln.lstrip().startswith("GPU0 ")
                       and "Affinity" in ln), None)
    if head_i is None:
        raise InputError("no `nvidia-smi topo -m` header found (a line with GPU0 ... CPU Affinity)")
    cols = _split_header(lines[head_i])
    devices = [c for c in cols if re.fullmatch(r"(GPU|NIC|mlx\w*)\d*", c)]
    extra = cols[len(devices):]
    links: dict[str, dict[str, str]] = {}
    gpus, nics = [], []
    legend: dict[str, str] = {}
    nic_names: dict[str, str] = {}
    i = head_i + 1
    while i < len(lines):
        ln = lines[i]
        tok = ln.split()
        if not tok:
            i += 1
            if links:
                break
            continue
        if tok[0] not in devices:
            break
        row_links = tok[1:1 + len(devices)]
        if len(row_links) != len(devices):
            raise InputError(f"row {tok[0]} has {len(row_links)} link columns, the header names {len(devices)}")
        links[tok[0]] = dict(zip(devices, row_links))
        rest = dict(zip(extra, tok[1 + len(devices):]))
        if tok[0].startswith("GPU"):
            numa = rest.get("NUMA Affinity", "N/A")
            gpus.append({"gpu": int(tok[0][3:]), "cpu_affinity": parse_cpulist(rest.get("CPU Affinity", "")),
                         "numa_node": int(numa) if numa.isdigit() else None})
        else:
            nics.append(tok[0])
        i += 1
    for ln in lines[i:]:
        m = re.match(r"^\s*(X|NV#|[A-Z]{2,4})\s*=\s*(.+)$", ln)
        if m:
            legend[m.group(1)] = m.group(2).strip()
        m = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)", ln)
        if m:
            nic_names[m.group(1)] = m.group(2)
    if not gpus:
        raise InputError("the topology table has no GPU rows")
    return {"devices": devices, "links": links, "gpus": gpus, "nics": nics, "legend": legend, "nic_names": nic_names}


def infer_smt(nodes: list[Node]) -> dict[int, list[int]]:
    """SMT siblings from Linux's usual numbering, when a table gives nothing better: with N logical
    CPUs numbered so that every node holds [a..b] ∪ [a+N/2..b+N/2] (physical cores first, their
    second threads after all of them, as in '0-51,104-155'), CPU c and c + N/2 share a core.
    Otherwise every CPU is its own core."""
    cpus = sorted(c for n in nodes for c in n.cpus)
    total = len(cpus)
    half = total // 2
    if total and total % 2 == 0 and cpus == list(range(total)):
        ok = all(set(c + half for c in n.cpus if c < half) == {c for c in n.cpus if c >= half} for n in nodes)
        if ok:
            return {c: sorted({c, (c + half) % total}) for c in cpus}
    return {c: [c] for c in cpus}


def topology_from_topo(parsed: dict[str, Any]) -> Topology:
    """A `Topology` from a parsed table: a node per NUMA affinity value holding its GPUs' CPUs
    (GPUs with "N/A" go to the node whose CPU list equals theirs, else none); distances are unknown
    there (local 10, remote 20 assumed); SMT siblings inferred from the numbering (`infer_smt`)."""
    node_cpus: dict[int, set[int]] = {}
    for g in parsed["gpus"]:
        if g["numa_node"] is not None:
            node_cpus.setdefault(g["numa_node"], set()).update(g["cpu_affinity"])
    nodes = [Node(i, sorted(c), None) for i, c in sorted(node_cpus.items())]
    if not nodes:  # every NUMA affinity N/A: one node per distinct CPU list
        lists = []
        for g in parsed["gpus"]:
            if g["cpu_affinity"] and g["cpu_affinity"] not in lists:
                lists.append(g["cpu_affinity"])
        nodes = [Node(i, c, None) for i, c in enumerate(lists)]
    gpus = []
    for g in parsed["gpus"]:
        node = g["numa_node"]
        if node is None:
            node = next((n.id for n in nodes if n.cpus == g["cpu_affinity"]), None)
        gpus.append(GPU(g["gpu"], f"GPU{g['gpu']}", node, g["cpu_affinity"], "NVIDIA"))
    n = len(nodes)
    dist = [[10 if i == j else 20 for j in range(n)] for i in range(n)]
    return Topology(nodes, dist, gpus, [], infer_smt(nodes), source="nvidia-smi topo -m")
