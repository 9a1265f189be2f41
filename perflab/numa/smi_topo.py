"""`nvidia-smi topo -m`, parsed: the GPU×GPU link matrix, each GPU's CPU and NUMA affinity, the
NIC rows and the legend.

    GPU0    GPU1    ...  CPU Affinity    NUMA Affinity    GPU NUMA ID
    GPU0     X      NV18 ...  0-51,104-155    0               N/A

Links: X (self), NV# (a bonded set of # NVLinks), PIX (at most one PCIe bridge), PXB (several
PCIe bridges), PHB (through a PCIe host bridge, i.e. the CPU), NODE (across host bridges within
one NUMA node), SYS (across the CPUs' interconnect, QPI/UPI/Infinity Fabric: another node).
"""

from __future__ import annotations

import itertools
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from perflab.core.errors import InputError
from perflab.numa.topology import (
    GPU,
    Node,
    Topology,
    format_cpulist,
    online_cpus,
    parse_cpulist,
    read_nodes,
    smt_siblings,
)

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


ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
DEVICE_RE = re.compile(r"GPU\d+|NIC\d+|mlx\w+")
# the columns after the link matrix that nvidia-smi prints, and what a value of each looks like
EXTRA_RE = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID")
VALUE_RE = {"CPU Affinity": re.compile(r"N/A|\d+(-\d+)?(:\d+)?(,\d+(-\d+)?(:\d+)?)*"),
            "NUMA Affinity": re.compile(r"N/A|\d+(-\d+)?(,\d+(-\d+)?)*"),
            "GPU NUMA ID": re.compile(r"N/A|\d+")}
TAB = 8


def clean_text(text: str) -> list[str]:
    """The table's lines without terminal escapes (colour, underline) and carriage returns."""
    return [ANSI_RE.sub("", ln).replace("\r", "") for ln in (text or "").splitlines()]


def _tokens(line: str) -> list[tuple[int, str]]:
    """(slot, text) of each cell of a row. Slots are the tab-separated cell indices nvidia-smi
    writes (blank cells kept). A line whose tabs a terminal or a web page turned into spaces is
    put back into tab cells from its 8-column tab stops when its cells sit on them; otherwise a
    cell's slot is its character column (a table re-aligned by hand)."""
    if "\t" in line:
        return [(i, c.strip()) for i, c in enumerate(line.split("\t")) if c.strip()]
    toks = [(m.start(), m.group()) for m in re.finditer(r"\S+", line)]
    if not toks or any(p % TAB not in (0, 1) for p, _ in toks):
        return [(p, t) for p, t in toks]
    out, slot, expect = [], 0, 0
    for p, t in toks:
        stop = p // TAB
        if out:
            slot += 1 + max(0, stop - expect)
        else:
            slot = stop
        out.append((slot, t))
        expect = (p + len(t)) // TAB + 1
    return out


def _header(line: str) -> tuple[list[tuple[float, str]], list[tuple[float, str]]]:
    """(device columns, extra columns) of the header line, each as (slot, name)."""
    cells: list[tuple[float, str]] = []
    if "\t" in line:
        # a cell may still hold several names separated by runs of spaces: older drivers wrote
        # "CPU Affinity    NUMA Affinity" in one tab cell (8× V100-SXM2 tables of driver 470);
        # each name gets its own slot between this tab cell and the next
        for i, c in enumerate(line.split("\t")):
            names = [x for x in re.split(r" {2,}", c.strip()) if x]
            cells += [(i + j / len(names), x) for j, x in enumerate(names)]
    else:
        # names with a space inside ("CPU Affinity") are one column: tokens are runs of words
        # separated by single spaces; slots as in `_tokens`
        toks = [(m.start(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", line)]
        aligned = all(p % TAB in (0, 1) for p, _ in toks)
        slot, expect = 0, 0
        for k, (p, t) in enumerate(toks):
            if not aligned:
                cells.append((p, t))
                continue
            stop = p // TAB
            slot = stop if k == 0 else slot + 1 + max(0, stop - expect)
            cells.append((slot, t))
            expect = (p + len(t)) // TAB + 1
    devs, extras = [], []
    for s, name in cells:
        if DEVICE_RE.fullmatch(name) and not extras:
            devs.append((s, name))
        else:
            extras.append((s, name))
    return devs, extras


def _assign(cells: list[tuple[int, str]], cols: list[tuple[float, str]], row: str) -> dict[str, str]:
    """Put a row's values into the extra columns: in order, each value in a column whose values
    look like it, the assignment whose slots lie nearest the columns' (a blank cell leaves its
    column empty). Two equally good assignments: the table does not say; refuse in one line."""
    n, k = len(cells), len(cols)
    if n > k:
        raise InputError(f"row {row} has {n} values after its links, the header names {k} columns "
                         f"({', '.join(c for _, c in cols)})")
    best: list[tuple[float, tuple[int, ...]]] = []
    for choice in itertools.combinations(range(k), n):
        if not all(VALUE_RE.get(cols[j][1], re.compile(r".+")).fullmatch(v) for (_, v), j in zip(cells, choice)):
            continue
        cost = sum(abs(s - cols[j][0]) for (s, _), j in zip(cells, choice))
        best.append((cost, choice))
    if not best:
        raise InputError(f"row {row}: its values {' '.join(v for _, v in cells)} do not fit the columns "
                         f"{', '.join(c for _, c in cols)}")
    best.sort()
    if len(best) > 1 and abs(best[0][0] - best[1][0]) < 1e-9:
        raise InputError(f"row {row} has blank cells and its spacing does not say which column "
                         f"{' '.join(v for _, v in cells)} belong to: save the table as nvidia-smi writes it "
                         f"(`nvidia-smi topo -m > topo.txt`, tabs kept)")
    return {cols[j][1]: v for (_, v), j in zip(cells, best[0][1])}


@dataclass
class TopoGPU:
    """One GPU row's affinity columns."""

    gpu: int  # the N of its GPUN row
    cpu_affinity: list[int]  # [] when the cell is blank
    numa_node: int | None  # None: "N/A" or no NUMA column


@dataclass
class TopoTable:
    """A parsed `nvidia-smi topo -m` table."""

    devices: list[str]  # the header's device columns: GPUs, then NICs
    links: dict[str, dict[str, str]]  # row → column → link ('X', 'NV18', 'SYS', ...)
    gpus: list[TopoGPU]
    nics: list[str]  # the NIC rows' names
    legend: dict[str, str]  # link code → its meaning, as the table's legend says it
    nic_names: dict[str, str]  # 'NIC0' → 'mlx5_0' (newer tables' NIC legend)

    def table(self):
        """One row per GPU: its CPU affinity (as a list), its NUMA node and its link to GPU0."""
        import pandas as pd

        return pd.DataFrame([{"GPU": g.gpu, "CPU affinity": format_cpulist(g.cpu_affinity) or "blank",
                              "NUMA node": "N/A" if g.numa_node is None else g.numa_node,
                              "link to GPU0": self.links.get(f"GPU{g.gpu}", {}).get("GPU0", "–")}
                             for g in self.gpus]).set_index("GPU")


def parse_topo(text: str) -> TopoTable:
    """Parse the text of `nvidia-smi topo -m` into a `TopoTable`; CPU lists are lists of ints, a
    NUMA node "N/A" is None. Raises InputError naming what is missing.

    Values go to the columns the header names by where they sit, not by counting cells, so a
    blank cell (a CPU Affinity left empty under a restricted cgroup) leaves its column empty
    instead of shifting the next value into it. Terminal escapes, carriage returns and any
    lines above the header (a shell prompt) are ignored; tabs and spaces both work."""
    lines = clean_text(text)
    head_i = next((i for i, ln in enumerate(lines) if re.search(r"\bGPU0\b", ln) and "Affinity" in ln), None)
    if head_i is None:
        head_i = next((i for i, ln in enumerate(lines) if re.match(r"^\s+GPU0\s+\S", ln)), None)
    if head_i is None:
        raise InputError("no `nvidia-smi topo -m` header found (a line with GPU0 ... CPU Affinity)")
    dev_cols, extra_cols = _header(lines[head_i])
    devices = [d for _, d in dev_cols]
    if not devices:
        raise InputError("the `nvidia-smi topo -m` header names no GPU column")
    links: dict[str, dict[str, str]] = {}
    legend: dict[str, str] = {}
    nic_names: dict[str, str] = {}
    rows: list[tuple[str, list[tuple[int, str]]]] = []
    i = head_i + 1
    while i < len(lines):
        ln = lines[i]
        cells = _tokens(ln)
        if not cells:
            i += 1
            if links:
                break
            continue
        name = cells[0][1]
        if name not in devices:
            break
        body = cells[1:]
        if len(body) < len(devices):
            raise InputError(f"row {name} has {len(body)} link columns, the header names {len(devices)}")
        links[name] = dict(zip(devices, (v for _, v in body[:len(devices)])))
        rows.append((name, body))
        i += 1
    # where each extra column's values sit: learned from the GPU rows that fill every column
    # (nvidia-smi pads some columns with a second tab), else the header's own slots, shifted
    # by the difference between the header's first device column and the rows' first link
    full = [b[len(devices):] for name, b in rows if name.startswith("GPU") and len(b) - len(devices) == len(extra_cols)]
    if full:
        cols = [(statistics.median(f[j][0] for f in full), c) for j, (_, c) in enumerate(extra_cols)]
    else:
        shift = statistics.median(b[0][0] for _, b in rows) - dev_cols[0][0] if rows else 0
        cols = [(s + shift, c) for s, c in extra_cols]
    gpus, nics = [], []
    for name, body in rows:
        if not name.startswith("GPU"):
            nics.append(name)
            continue
        rest = _assign(body[len(devices):], cols, name) if cols else {}
        numa = rest.get("NUMA Affinity", "N/A")
        gpus.append(TopoGPU(int(name[3:]), parse_cpulist(rest.get("CPU Affinity", "")),
                            int(numa) if numa.isdigit() else None))
    for ln in lines[i:]:
        m = re.match(r"^\s*(X|NV#|[A-Z]{2,4})\s*=\s*(.+)$", ln)
        if m:
            legend[m.group(1)] = m.group(2).strip()
        m = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)", ln)
        if m:
            nic_names[m.group(1)] = m.group(2)
    if not gpus:
        raise InputError("the topology table has no GPU rows")
    return TopoTable(devices, links, gpus, nics, legend, nic_names)


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


SMT_GUESS_NOTE = ("hyperthread siblings are a GUESS from the CPU numbering ({how}): the table does not say which "
                  "CPUs share a core. Give the real layout with --sysfs ROOT (a copy of that machine's /sys, or /sys "
                  "itself when run there)")
GUESS_PAIRS = "CPU c and c + N/2 share a core"
GUESS_SINGLE = "no usual pattern: each CPU taken as its own core"


def table_matches_sysfs(parsed: TopoTable, root: str | Path = "/sys") -> bool:
    """Whether the table describes the machine whose sysfs is at `root`: every CPU the table names
    is online there, and each NUMA node the table names holds the same CPUs there."""
    cpus = {c for g in parsed.gpus for c in g.cpu_affinity}
    if not cpus or not (Path(root) / "devices/system/cpu").is_dir():
        return False
    if not cpus <= set(online_cpus(root)):
        return False
    nodes, _ = read_nodes(root)
    by_id = {n.id: set(n.cpus) for n in nodes}
    return all(g.numa_node is None or set(g.cpu_affinity) <= by_id.get(g.numa_node, set()) for g in parsed.gpus)


BLANK_NODE_NOTE = ("NUMA node {node}'s CPUs are not in the table (the CPU Affinity of {gpus} is blank, as when a job's "
                   "cgroup holds none of that node's CPUs, e.g. under srun): ranks on those GPUs are bound by node "
                   "(numactl --cpunodebind={node}), never to another node's CPUs. Give --sysfs ROOT (that machine's "
                   "/sys, or /sys itself when run there) to name the CPUs")


def topology_from_topo(parsed: TopoTable, sysfs: str | Path | None = "/sys") -> Topology:
    """A `Topology` from a parsed table: a node per NUMA affinity value holding its GPUs' CPUs
    (GPUs with "N/A" go to the node whose CPU list equals theirs, else none); distances are unknown
    there (local 10, remote 20 assumed). SMT siblings come from `sysfs` when the table is that
    machine's (`table_matches_sysfs`); otherwise they are guessed from the numbering (`infer_smt`)
    and the topology's `notes` say so.

    A node the NUMA column names but whose GPUs all have a blank CPU Affinity (a restricted
    cgroup) takes its CPUs from `sysfs` when the table is that machine's; otherwise its CPUs are
    unknown (`Topology.unknown_cpus`, and a note): the planner binds its ranks by node, and never
    lends them another node's CPUs."""
    matches = sysfs is not None and table_matches_sysfs(parsed, sysfs)
    node_cpus: dict[int, set[int]] = {}
    for g in parsed.gpus:
        if g.numa_node is not None:
            node_cpus.setdefault(g.numa_node, set()).update(g.cpu_affinity)
    unknown: list[int] = []
    notes: list[str] = []
    blank = sorted(i for i, c in node_cpus.items() if not c)
    if blank and matches:
        from_sysfs = {n.id: n.cpus for n in read_nodes(sysfs)[0]}  # type: ignore[arg-type]  # matches: not None
        for i in blank:
            node_cpus[i] = set(from_sysfs.get(i, []))
    for i in blank:
        if not node_cpus[i]:
            unknown.append(i)
            gpus_here = [f"GPU{g.gpu}" for g in parsed.gpus if g.numa_node == i]
            notes.append(BLANK_NODE_NOTE.format(node=i, gpus=", ".join(gpus_here)))
    nodes = [Node(i, sorted(c), None) for i, c in sorted(node_cpus.items())]
    if not any(n.cpus for n in nodes) and not unknown:  # every NUMA affinity N/A: one node per distinct CPU list
        lists = []
        for g in parsed.gpus:
            if g.cpu_affinity and g.cpu_affinity not in lists:
                lists.append(g.cpu_affinity)
        nodes = [Node(i, c, None) for i, c in enumerate(lists)]
    gpus = []
    for g in parsed.gpus:
        node = g.numa_node
        if node is None:
            node = next((n.id for n in nodes if n.cpus and n.cpus == g.cpu_affinity), None)
        gpus.append(GPU(g.gpu, f"GPU{g.gpu}", node, g.cpu_affinity, "NVIDIA"))
    n = len(nodes)
    dist = [[10 if i == j else 20 for j in range(n)] for i in range(n)]
    cpus = sorted(c for nd in nodes for c in nd.cpus)
    if matches:
        return Topology(nodes, dist, gpus, [], smt_siblings(sysfs, cpus),  # type: ignore[arg-type]  # matches: not None
                        source=f"nvidia-smi topo -m, SMT siblings from sysfs at {sysfs}", notes=notes,
                        unknown_cpus=unknown)
    siblings = infer_smt(nodes)
    how = GUESS_PAIRS if any(len(v) > 1 for v in siblings.values()) else GUESS_SINGLE
    notes = ([SMT_GUESS_NOTE.format(how=how)] if cpus else []) + notes
    return Topology(nodes, dist, gpus, [], siblings, source="nvidia-smi topo -m", notes=notes, unknown_cpus=unknown)
