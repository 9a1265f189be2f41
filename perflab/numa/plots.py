"""Figures of lesson 08: a topology drawn as nodes (boxes) holding CPU cores and GPUs, and a plan
drawn as which rank owns which core."""

from __future__ import annotations

from perflab.numa.plan import RankPlan
from perflab.numa.topology import Topology, format_cpulist


def draw_topology(topo: Topology, plan: list[RankPlan] | None = None, *, title: str = ""):
    """One box per NUMA node: its CPUs as a grid of small squares (coloured by the rank that owns
    them when `plan` is given; SMT second threads pale), its GPUs below, memory in the label."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    nodes = topo.nodes
    owner = {c: p.rank for p in (plan or []) for c in p.cpus}
    second = {c for c, sib in topo.siblings.items() if len(sib) > 1 and c != min(sib)}
    cols = 16
    rows_per = [max(1, -(-len(n.cpus) // cols)) for n in nodes]
    fig, ax = plt.subplots(figsize=(min(13, 3.2 + 4.6 * len(nodes)), 2.2 + 0.32 * max(rows_per) + 0.6))
    cmap = plt.get_cmap("tab10")
    x0 = 0.0
    width = cols * 0.3 + 0.6
    for n, nrow in zip(nodes, rows_per):
        height = nrow * 0.3 + 1.6
        ax.add_patch(Rectangle((x0, 0), width, height, fill=False, lw=1.5))
        mem = f", {n.memory_bytes / 2**30:.0f} GiB" if n.memory_bytes else ""
        ax.text(x0 + 0.1, height - 0.25, f"node {n.id}: {len(n.cpus)} CPUs ({format_cpulist(n.cpus) or 'none'}){mem}",
                fontsize=8, va="top")
        for i, c in enumerate(n.cpus):
            r, k = divmod(i, cols)
            color = cmap(owner[c] % 10) if c in owner else "lightgray"
            ax.add_patch(Rectangle((x0 + 0.3 + k * 0.3, height - 0.75 - r * 0.3), 0.26, 0.26, color=color,
                                   alpha=0.45 if c in second else 1.0))
            if len(n.cpus) <= 32:  # few CPUs: number each square, so a small machine's figure reads alone
                ax.text(x0 + 0.43 + k * 0.3, height - 0.62 - r * 0.3, str(c), fontsize=6, ha="center", va="center")
        if len(n.cpus) <= 32:
            ax.text(x0 + 0.3, height - 0.95 - (nrow - 1) * 0.3, "each square: one CPU (hardware thread), numbered",
                    fontsize=7, va="top", color="dimgray")
        gpus = [g for g in topo.gpus if g.numa_node == n.id]
        if not gpus:
            ax.text(x0 + 0.3, 0.37, "no GPU on this node", fontsize=7, va="center", color="dimgray")
        for j, g in enumerate(gpus):
            ax.add_patch(Rectangle((x0 + 0.3 + j * 0.75, 0.15), 0.65, 0.45, color="#76b900" if g.vendor == "NVIDIA" else "tab:orange"))
            ax.text(x0 + 0.62 + j * 0.75, 0.37, f"GPU{g.index}", fontsize=7, ha="center", va="center", color="white")
        x0 += width + 0.4
    orphans = [g for g in topo.gpus if g.numa_node is None]
    if orphans:
        ax.text(0, -0.35, "GPUs with unknown node: " + ", ".join(f"GPU{g.index}" for g in orphans), fontsize=8)
    if plan:
        handles = [Rectangle((0, 0), 1, 1, color=cmap(p.rank % 10)) for p in plan[:10]]
        ax.legend(handles, [f"rank {p.rank}" for p in plan[:10]], fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    ax.set_xlim(-0.2, x0)
    ax.set_ylim(-0.6, max(rows_per) * 0.3 + 1.8)
    ax.set_axis_off()
    ax.set_title(title or f"topology ({topo.source}); pale: the second hardware thread of a core", fontsize=9)
    fig.tight_layout()
    return fig
