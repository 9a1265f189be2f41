"""Write the `nvidia-smi topo -m` corpus: one 8-GPU, 2-NIC, 2-socket table in the layouts people
save and paste it in, and an older layout.

    python tests/corpus/make_topo.py        # rewrites tests/corpus/topo/

The base table is laid out as nvidia-smi writes it: tab-separated cells, a leading tab on the
header, a second tab after the NUMA Affinity value, NIC rows with links only, then the legend.
The variants are what happens to it on the way to a bug report: tabs turned into spaces by a
terminal, the header's underline escape codes kept, CRLF line ends, the shell prompt pasted above
it, a CPU Affinity left blank for the GPUs a restricted cgroup hides (as under `srun`), and the
older layout without NUMA columns whose NICs are named mlx5_N.

The files named published_*.txt are not written here: they are tables copied from public pages,
each listed in topo/published.json with where it was published and what it must parse to.
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).parent / "topo"

GPUS = 8
NICS = ["NIC0", "NIC1"]
CPUS = {0: "0-55,112-167", 1: "56-111,168-223"}
LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"""


def link(a: str, b: str) -> str:
    if a == b:
        return " X "
    ga, gb = a.startswith("GPU"), b.startswith("GPU")
    if ga and gb:
        return "NV18"
    na = int(a[3:]) // 4 if ga else int(a[3:])
    nb = int(b[3:]) // 4 if gb else int(b[3:])
    if not ga and not gb:
        return "SYS"
    return "PXB" if na == nb else "SYS"


def table(blank_cpu: frozenset[int] | set[int] = frozenset(), numa_cols: bool = True, nic_prefix: str = "NIC") -> str:
    nics = [f"{nic_prefix}{i}" if nic_prefix == "NIC" else f"mlx5_{i}" for i in range(len(NICS))]
    devs = [f"GPU{i}" for i in range(GPUS)] + nics
    extra = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"] if numa_cols else ["CPU Affinity"]
    lines = ["\t" + "\t".join(devs + extra)]
    for d in devs:
        kind = "NIC" + d[-1] if not d.startswith("GPU") else d
        cells = [d] + [link(kind, "NIC" + e[-1] if not e.startswith("GPU") else e) for e in devs]
        if d.startswith("GPU"):
            g = int(d[3:])
            cpu = "" if g in blank_cpu else CPUS[g // 4]
            cells.append(cpu)
            if numa_cols:
                cells += [str(g // 4), "", "N/A"]  # nvidia-smi's second tab after the NUMA value
        lines.append("\t".join(cells))
    legend = LEGEND if nic_prefix == "NIC" else LEGEND.split("\nNIC Legend")[0] + "\n"
    return "\n".join(lines) + "\n" + legend


def expected(blank_cpu: frozenset[int] | set[int] = frozenset(), numa_cols: bool = True) -> list[dict]:
    from_list = {0: list(range(0, 56)) + list(range(112, 168)), 1: list(range(56, 112)) + list(range(168, 224))}
    return [{"gpu": g, "cpu_affinity": [] if g in blank_cpu else from_list[g // 4],
             "numa_node": (g // 4) if numa_cols else None} for g in range(GPUS)]


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    base = table()
    files = {
        "tabs.txt": base,
        "spaces.txt": "\n".join(ln.expandtabs(8).rstrip() for ln in base.splitlines()) + "\n",
        "ansi_header.txt": base.replace("\tGPU0", "\t\x1b[4mGPU0", 1).replace("GPU NUMA ID\n", "GPU NUMA ID\x1b[0m\n", 1),
        "crlf.txt": base.replace("\n", "\r\n"),
        "prompt_above.txt": "user@node-17:~$ nvidia-smi topo -m\n" + base + "user@node-17:~$ \n",
        "blank_cpu_tabs.txt": table(blank_cpu={2, 3, 6, 7}),
        "blank_cpu_spaces.txt": "\n".join(ln.expandtabs(8).rstrip() for ln in table(blank_cpu={2, 3, 6, 7}).splitlines()) + "\n",
        "old_layout_mlx.txt": table(numa_cols=False, nic_prefix="mlx5_"),
    }
    want = {name: expected() for name in files}
    want["blank_cpu_tabs.txt"] = want["blank_cpu_spaces.txt"] = expected({2, 3, 6, 7})
    want["old_layout_mlx.txt"] = expected(numa_cols=False)
    for name, text in files.items():
        (OUT / name).write_bytes(text.encode())
    (OUT / "expected.json").write_text(json.dumps(want, indent=0) + "\n")
    print("\n".join(sorted(files)))


if __name__ == "__main__":
    main()
