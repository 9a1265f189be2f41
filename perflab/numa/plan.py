"""Which cores each local rank gets, and binding a process to them.

The rule (Stas Bekman, *Machine Learning Engineering*, chapter "Software Tune Up For The Best
Performance", section NUMA affinity: bind each process to the CPUs of its GPU's NUMA node): rank r
drives GPU r; the CPUs of that GPU's NUMA node are split evenly among the ranks whose GPUs sit on
that node, whole physical cores first (a core's SMT sibling goes to the same rank), and no CPU
goes to two ranks. A node without CPUs (memory only) lends its GPUs the nearest node's CPUs (by
the distance matrix); a rank crosses to another node only when its node has fewer cores than
ranks. A node whose CPUs are unknown (a `nvidia-smi topo -m` table with blank CPU Affinity cells)
lends nothing and borrows nothing: its ranks are bound by node (`numactl --cpunodebind`). Without GPUs (a CPU machine), ranks are spread over the nodes in turn.

    >>> p = plan(8, read_topology())          # or topology_from_topo(parse_topo(text))
    >>> p[0].cpus, p[0].numactl                # [0..12, 104..116], 'numactl --physcpubind=... --membind=0'
    >>> bind_rank(p[local_rank])              # os.sched_setaffinity, says what changed
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass, field

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, fields_json
from perflab.core.validate import positive_int
from perflab.numa.topology import Topology, format_cpulist


@dataclass
class RankPlan:
    rank: int  # local rank
    gpu: int | None
    node: int | None
    cpus: list[int]
    note: str = ""

    @property
    def numactl(self) -> str:
        mem = f" --membind={self.node}" if self.node is not None else ""
        if not self.cpus and self.node is not None:  # the node's CPUs are unknown here: bind by node
            return f"numactl --cpunodebind={self.node}{mem}"
        return f"numactl --physcpubind={format_cpulist(self.cpus)}{mem}"

    def as_dict(self) -> JSON:
        return {**fields_json(self), "numactl": self.numactl}


def core_groups(cpus: list[int], siblings: dict[int, list[int]]) -> list[list[int]]:
    """`cpus` grouped by physical core (each group: its hardware threads present in `cpus`), in the
    order of each core's first thread."""
    seen: set[int] = set()
    groups = []
    for c in sorted(cpus):
        if c in seen:
            continue
        g = [x for x in sorted(siblings.get(c, [c])) if x in cpus and x not in seen] or [c]
        if c not in g:
            g = [c]
        seen.update(g)
        groups.append(g)
    return groups


def split_node(cpus: list[int], n_ranks: int, siblings: dict[int, list[int]]) -> list[list[int]]:
    """Split one node's CPUs among `n_ranks`: whole cores, as even as they divide; each rank's list
    has its cores' first threads, then their siblings. Needs at least one CPU per rank."""
    groups = core_groups(cpus, siblings)
    if len(groups) >= n_ranks:
        out = []
        for r in range(n_ranks):
            mine = groups[r * len(groups) // n_ranks:(r + 1) * len(groups) // n_ranks]
            first = [g[0] for g in mine]
            rest = [x for g in mine for x in g[1:]]
            out.append(first + sorted(rest))
        return out
    flat = [g[0] for g in groups] + [x for g in groups for x in g[1:]]  # physical threads first
    if len(flat) < n_ranks:
        raise InputError(f"{n_ranks} ranks need at least {n_ranks} CPUs; {len(flat)} are available")
    return [flat[r * len(flat) // n_ranks:(r + 1) * len(flat) // n_ranks] for r in range(n_ranks)]


def plan(nproc: int, topo: Topology, *, allowed: list[int] | None = None) -> list[RankPlan]:
    """Cores for `nproc` local ranks on `topo` (see the module docstring). `allowed` limits the
    CPUs used (default: every online CPU of the topology)."""
    nproc = positive_int("nproc", nproc, maximum=4096)
    allowed_set = set(allowed) if allowed is not None else {c for n in topo.nodes for c in n.cpus}
    node_cpus = {n.id: [c for c in n.cpus if c in allowed_set] for n in topo.nodes}
    usable = [nid for nid, c in node_cpus.items() if c]
    gpus = sorted(topo.gpus, key=lambda g: g.index)
    unknown = set(topo.unknown_cpus)
    # ranks whose GPU sits on a node whose CPUs the source does not give: bound by node, never lent
    # another node's CPUs (a blank CPU Affinity says nothing about where the GPU is)
    by_node = {r: gpus[r].numa_node for r in range(min(nproc, len(gpus))) if gpus[r].numa_node in unknown}
    need = nproc - len(by_node)
    if need and not usable:
        raise InputError("no usable CPU in this topology")
    if sum(len(c) for c in node_cpus.values()) < need:
        raise InputError(f"{need} ranks need {need} CPUs of their own; this machine offers "
                         f"{sum(len(c) for c in node_cpus.values())}: use fewer ranks")
    ids = [n.id for n in topo.nodes]

    def nearest_with_cpus(nid: int) -> int:
        if nid in usable:
            return nid
        if nid in ids and topo.distances and len(topo.distances) == len(ids):
            row = topo.distances[ids.index(nid)]
            return min(usable, key=lambda u: (row[ids.index(u)], u))
        return usable[0]

    # which node each rank lives on
    rank_node: list[int | None] = []
    notes: dict[int, str] = {}
    for r in range(nproc):
        g = gpus[r] if r < len(gpus) else None
        if r in by_node:
            rank_node.append(None)
            continue
        if g is not None and g.numa_node is not None:
            home = nearest_with_cpus(g.numa_node)
            if home != g.numa_node:
                notes[r] = f"GPU {g.index}'s node {g.numa_node} has no CPUs: nearest node {home}"
        elif g is not None and g.cpus:
            local = set(g.cpus)
            home = max(usable, key=lambda u: (len(set(node_cpus[u]) & local), -u))
            notes[r] = "GPU's node unknown (numa_node -1): the node of its local CPUs"
        else:
            home = usable[r % len(usable)]
            if g is None and gpus:
                notes[r] = "no GPU for this rank"
            elif g is not None:
                notes[r] = f"GPU {g.index}'s node and local CPUs are unknown: node {home} by turn"
        rank_node.append(home)
    # split each node among its ranks; ranks that do not fit borrow spare cores elsewhere
    out: dict[int, RankPlan] = {r: RankPlan(r, gpus[r].index, node, [],
                                            f"GPU {gpus[r].index} is on node {node}, whose CPUs the table does not "
                                            f"give: bind by node") for r, node in by_node.items()}
    spare: list[int] = []
    overflow: list[int] = []
    for nid in usable:
        ranks = [r for r in range(nproc) if rank_node[r] == nid]
        cpus = node_cpus[nid]
        fit = ranks[:len(cpus)]
        overflow += ranks[len(cpus):]
        used: set[int] = set()
        if fit:
            for r, mine in zip(fit, split_node(cpus, len(fit), topo.siblings)):
                out[r] = RankPlan(r, gpus[r].index if r < len(gpus) else None, nid, mine, notes.get(r, ""))
                used.update(mine)
        spare += [c for c in cpus if c not in used]
    for r in overflow:  # only when a node has fewer CPUs than ranks
        c = spare.pop(0)
        out[r] = RankPlan(r, gpus[r].index if r < len(gpus) else None, topo.node_of(c), [c],
                          f"node {rank_node[r]} has fewer CPUs than ranks: borrowed CPU {c}")
    return [out[r] for r in range(nproc)]


def plan_table(p: list[RankPlan]):
    """The plan as a DataFrame a person can copy: rank, GPU, node, CPUs (as a list), count, numactl."""
    import pandas as pd

    return pd.DataFrame([{"rank": x.rank, "GPU": "none (CPU only)" if x.gpu is None else x.gpu, "node": x.node,
                          "CPUs": format_cpulist(x.cpus) if x.cpus else f"unknown (node {x.node})",
                          "count": len(x.cpus), "numactl": x.numactl, "note": x.note} for x in p])


def check_plan(p: list[RankPlan], topo: Topology) -> list[str]:
    """Problems with a plan, one line each (empty: none): a CPU given twice, a CPU that is not in
    the topology, a rank that crosses its GPU's node although that node had room."""
    problems = []
    seen: dict[int, int] = {}
    known = {c for n in topo.nodes for c in n.cpus}
    for x in p:
        for c in x.cpus:
            if c in seen:
                problems.append(f"CPU {c} is given to ranks {seen[c]} and {x.rank}")
            seen[c] = x.rank
            if c not in known:
                problems.append(f"rank {x.rank} gets CPU {c}, which is not in the topology")
        if not x.cpus and (x.node is None or x.node not in topo.unknown_cpus):
            problems.append(f"rank {x.rank} gets no CPU")
        gpu = next((g for g in topo.gpus if g.index == x.gpu), None)
        if gpu is not None and gpu.numa_node is not None and x.node != gpu.numa_node and \
                any(n.id == gpu.numa_node and n.cpus for n in topo.nodes) and "fewer CPUs than ranks" not in x.note:
            problems.append(f"rank {x.rank} is planned on node {x.node}, off its GPU {gpu.index}'s node {gpu.numa_node}")
    return problems


def check_text(p: list[RankPlan], topo: Topology) -> str:
    """`check_plan` in a sentence: what is wrong with the plan, or that nothing is."""
    problems = check_plan(p, topo)
    if problems:
        return "the plan has problems: " + "; ".join(problems)
    return (f"checked: {len(p)} rank{'s' if len(p) != 1 else ''}, no CPU given twice, every CPU in the topology, "
            "every rank on its GPU's node")


def numactl_available() -> bool:
    return shutil.which("numactl") is not None


TOOLS = (("numactl", "memory binding (--membind) and CPU binding at process start"),
         ("lstopo", "a picture of caches, cores and PCI devices (hwloc)"),
         ("nvidia-smi", "`topo -m`: links and affinity of NVIDIA GPUs"))


def tools_table():
    """The optional tools, whether each is installed here, and what each adds."""
    import pandas as pd

    return pd.DataFrame([{"tool": t, "installed": "yes" if shutil.which(t) else "no", "adds": a}
                         for t, a in TOOLS]).set_index("tool")


@dataclass
class Binding:
    """A process's CPUs before and after binding it (CPU lists as `format_cpulist` writes them)."""

    rank: int
    before: str
    after: str
    changed: bool
    workers: list[str] = field(default_factory=list)  # what its DataLoader workers saw (`binding_demo` only)

    def table(self):
        """Who saw which CPUs: the process before and after binding, then each of its DataLoader workers."""
        import pandas as pd

        return pd.DataFrame([{"who": "the rank, before", "CPUs": self.before}, {"who": "the rank, after", "CPUs": self.after}]
                            + [{"who": f"DataLoader worker {i}", "CPUs": w} for i, w in enumerate(self.workers)])


def bind_rank(rank_plan: RankPlan, pid: int = 0) -> Binding:
    """Restrict process `pid` (0: this one) to the plan's CPUs with os.sched_setaffinity. Threads
    and processes it starts afterwards (DataLoader workers) inherit the set. Returns what changed."""
    if not rank_plan.cpus:
        raise InputError(f"rank {rank_plan.rank}'s CPUs are unknown (node {rank_plan.node}): bind it by node, "
                         f"`{rank_plan.numactl} python ...`")
    before = sorted(os.sched_getaffinity(pid))
    os.sched_setaffinity(pid, rank_plan.cpus)
    after = sorted(os.sched_getaffinity(pid))
    return Binding(rank_plan.rank, format_cpulist(before), format_cpulist(after), before != after)


def binding_demo(rank_plan: RankPlan, workers: int = 2, timeout: float = 120) -> Binding:
    """Bind a fresh Python process to `rank_plan`'s CPUs and report its affinity before and after,
    and the affinity its DataLoader workers see (they are forked after the binding). Runs in a
    subprocess, so the caller's own affinity is left alone."""
    import json
    import subprocess
    import sys

    code = f"""
import json, os
import torch
from torch.utils.data import DataLoader, Dataset
from perflab.core.jsonable import to_json
from perflab.numa.plan import RankPlan, bind_rank
class Affinity(Dataset):
    def __len__(self): return {int(workers)}
    def __getitem__(self, i): return torch.tensor(sorted(os.sched_getaffinity(0)))
done = bind_rank(RankPlan(**{asdict(rank_plan)!r}))
seen = [t.tolist() for t in DataLoader(Affinity(), batch_size=None, num_workers={int(workers)})]
from perflab.numa.topology import format_cpulist
done.workers = [format_cpulist(s) for s in seen]
print(json.dumps(to_json(done)))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise InputError(f"the binding demo failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return Binding(**json.loads(r.stdout.strip().splitlines()[-1]))


@dataclass(frozen=True)
class BoundLaunch:
    """A torchrun job whose ranks bound themselves (`perflab.distributed.torchrun.launch(..., bind=True)`):
    its one-line message and each rank's binding line, or why it did not run."""

    message: str
    bindings: tuple[str, ...] = ()

    def text(self) -> str:
        return "\n".join((self.message, *self.bindings))


def launch_bound(ranks: int, *, run: bool = True, timeout: float = 120) -> BoundLaunch:
    """Start `ranks` ranks of a small job under torchrun with `bind=True` (perflab.distributed's launcher)
    and read each rank's binding line (printed by `perflab.numa.bound`); `run=False` says why not."""
    if not run:
        return BoundLaunch("smoke mode: the torchrun launch (a few seconds per rank start) is skipped here")
    from perflab.distributed.torchrun import launch

    res = launch("perflab.distributed.workers.faulty", ranks, ["--work-s", "0.05"], timeout=timeout, bind=True)
    lines = tuple(next((ln for ln in r.stdout.splitlines() if "perflab.numa.bound" in ln), "(no binding line)")
                  for r in res.ranks)
    return BoundLaunch(res.message, lines)
