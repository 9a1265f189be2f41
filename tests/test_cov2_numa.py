"""NUMA's remaining edges: nvidia-smi tables realigned by hand, with a blank line under the header,
a legend straight after the rows, ambiguous blank cells or every NUMA affinity N/A; a table from
another machine than this sysfs; plans with a GPU on an unknown node, more ranks than GPUs and
sibling lists that leave a CPU out; a failing numactl and binding demo; the drawing of a GPU
whose node the kernel does not know."""

from __future__ import annotations

import os
import subprocess

import pytest

from perflab.core.errors import InputError
from perflab.numa import effect, lab08, panel, plan, plots, smi_topo, topology
from perflab.numa.topology import GPU, Node, Topology


def _two_node_topo(gpus: list[GPU]) -> Topology:
    return Topology(nodes=[Node(0, [0, 1, 2, 3], None), Node(1, [4, 5, 6, 7], None)],
                    distances=[[10, 21], [21, 10]], gpus=gpus, affinity=list(range(8)))


# --- nvidia-smi topo -m, as people paste it ----------------------------------------------------

def test_a_table_realigned_by_hand_is_read_by_character_columns():
    text = ("      GPU0  GPU1  CPU Affinity  NUMA Affinity\n"
            "GPU0   X    NV4   0-3           0\n"
            "GPU1  NV4    X    4-7           1\n")
    parsed = smi_topo.parse_topo(text)
    assert parsed["gpus"] == [{"gpu": 0, "cpu_affinity": [0, 1, 2, 3], "numa_node": 0},
                              {"gpu": 1, "cpu_affinity": [4, 5, 6, 7], "numa_node": 1}]
    assert parsed["links"]["GPU0"]["GPU1"] == "NV4"


def test_blank_cells_whose_spacing_does_not_say_their_column_are_refused_in_one_line():
    head = "      GPU0  CPU Affinity  NUMA Affinity   GPU NUMA ID"
    row = "GPU0   X    0-3"
    row += " " * (35 - len(row)) + "0"  # '0' midway between NUMA Affinity and GPU NUMA ID
    with pytest.raises(InputError, match=r"row GPU0 has blank cells and its spacing does not say which column "
                                         r"0-3 0 belong to: save the table as nvidia-smi writes it") as e:
        smi_topo.parse_topo(f"{head}\n{row}\n")
    assert "\n" not in str(e.value)


def test_a_blank_line_under_the_header_and_a_legend_straight_after_the_rows():
    text = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n\n"
            "GPU0\t X \tNV4\t0-3\t0\nGPU1\tNV4\t X \t4-7\t1\nLegend:\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n")
    parsed = smi_topo.parse_topo(text)
    assert [g["numa_node"] for g in parsed["gpus"]] == [0, 1]
    assert parsed["legend"]["X"] == "Self" and "NV#" in parsed["legend"]


def test_every_numa_affinity_na_gives_one_node_per_distinct_cpu_list():
    text = ("\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tNV4\tNV4\t0-3\tN/A\nGPU1\tNV4\t X \tNV4\t4-7\tN/A\nGPU2\tNV4\tNV4\t X \t0-3\tN/A\n")
    topo = smi_topo.topology_from_topo(smi_topo.parse_topo(text), sysfs=None)
    assert [(n.id, n.cpus) for n in topo.nodes] == [(0, [0, 1, 2, 3]), (1, [4, 5, 6, 7])]
    assert [(g.index, g.numa_node) for g in topo.gpus] == [(0, 0), (1, 1), (2, 0)]


def test_a_table_naming_cpus_this_sysfs_does_not_have_is_not_this_machine(tmp_path):
    cpu = tmp_path / "devices/system/cpu"
    cpu.mkdir(parents=True)
    (cpu / "online").write_text("0-3\n")
    parsed = {"gpus": [{"gpu": 0, "cpu_affinity": [0, 1, 2, 3, 4, 5], "numa_node": 0}]}
    assert smi_topo.table_matches_sysfs(parsed, tmp_path) is False
    parsed["gpus"][0]["cpu_affinity"] = [0, 1]
    assert smi_topo.table_matches_sysfs(parsed, tmp_path) is True  # no node folders: one node holds them
    assert smi_topo.table_matches_sysfs(parsed, tmp_path / "elsewhere") is False  # no sysfs there
    assert smi_topo.table_matches_sysfs({"gpus": [{"gpu": 0, "cpu_affinity": [], "numa_node": None}]}, tmp_path) is False


def test_nvml_and_sysfs_bus_ids_compare_equal():
    """NVML writes an 8-digit PCI domain, sysfs a 4-digit one: the same GPU either way."""
    assert topology._bus_key("00000000:18:00.0") == topology._bus_key("0000:18:00.0") == "0000:18:00.0"
    assert topology._bus_key("00000000:3B:00.0") != topology._bus_key("0000:18:00.0")


# --- plans -------------------------------------------------------------------------------------

def test_a_gpu_on_a_node_the_topology_does_not_list_goes_to_the_first_node_with_cpus():
    gpus = [GPU(0, "0000:18:00.0", 7, [], "NVIDIA")]
    p = plan.plan(1, _two_node_topo(gpus))
    assert p[0].node == 0 and p[0].note == "GPU 0's node 7 has no CPUs: nearest node 0"


def test_more_ranks_than_gpus_are_dealt_to_nodes_by_turn_and_say_they_have_no_gpu():
    gpus = [GPU(0, "0000:18:00.0", 0, [0, 1, 2, 3], "NVIDIA")]
    p = plan.plan(3, _two_node_topo(gpus))
    assert [r.note for r in p[1:]] == ["no GPU for this rank"] * 2
    assert p[0].as_dict()["numactl"] == p[0].numactl == f"numactl --physcpubind={topology.format_cpulist(p[0].cpus)} --membind=0"
    assert set(p[0].as_dict()) >= {"rank", "cpus", "node", "numactl"}


def test_sibling_lists_that_disagree_never_put_a_cpu_in_two_cores():
    """A copied or hand-made sysfs can list CPU 0's siblings without CPU 0, and CPU 1's with it:
    CPU 0 is its own core, and CPU 1's core is what is left of its list."""
    assert plan.core_groups([0, 1], {0: [1], 1: [0, 1]}) == [[0], [1]]
    assert plan.core_groups([0, 1, 2, 3], {0: [0, 2], 1: [1, 3], 2: [0, 2], 3: [1, 3]}) == [[0, 2], [1, 3]]


def test_a_failing_binding_demo_says_why_in_one_line(monkeypatch):
    def failed(*a, **k):
        return subprocess.CompletedProcess(a, 1, "", "Traceback (most recent call last):\nOSError: [Errno 22] Invalid argument\n")

    monkeypatch.setattr(subprocess, "run", failed)
    with pytest.raises(InputError, match=r"^the binding demo failed: OSError: \[Errno 22\] Invalid argument$"):
        plan.binding_demo(plan.RankPlan(rank=0, gpu=None, node=0, cpus=[0]))


# --- measuring, the panel, the lab check, the drawing -------------------------------------------

def test_a_numactl_that_fails_gives_a_row_with_its_last_line(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "numactl"
    fake.write_text("#!/bin/sh\necho 'set_mempolicy: Invalid argument' >&2\necho 'numactl: node 1 has no memory' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cpus = sorted(os.sched_getaffinity(0))
    two = Topology(nodes=[Node(0, cpus[:1], None), Node(1, cpus[1:] or cpus[:1], None)],
                   distances=[[10, 21], [21, 10]], gpus=[], affinity=cpus)
    rows = effect.memory_local_vs_remote(two, nbytes=2**20)["rows"]
    assert [r["error"] for r in rows] == ["numactl: node 1 has no memory"] * 2
    assert effect.remote_over_local(rows, "gbps") is None
    lat, _ = effect.measured_tables(rows)
    assert set(lat.values()) == {"failed: numactl: node 1 has no memory"}


def test_the_panel_offers_this_machine_and_the_published_server():
    topos = panel.topologies()
    assert set(topos) == {panel.HERE, panel.SERVER}
    assert len(topos[panel.SERVER].gpus) == 8 and len(topos[panel.SERVER].nodes) == 2


def test_meminfo_without_memtotal_is_unknown(tmp_path):
    (tmp_path / "meminfo").write_text("MemFree:  1024 kB\n")
    assert panel.proc_memtotal_bytes(tmp_path / "meminfo") is None
    (tmp_path / "meminfo").write_text("MemTotal:  2048 kB\n")
    assert panel.proc_memtotal_bytes(tmp_path / "meminfo") == 2048 * 1024


@pytest.mark.parametrize("split", [None, "0-3", [[0, 1]], {0: [0, 1], 1: [2, 3]}])
def test_lab08_refuses_a_split_that_is_not_one_list_per_rank(split):
    assert lab08.rule_problems(split, [0, 1, 2, 3], 2, {}) == \
        [f"expected a list of 2 lists (one per rank), got {split!r}"]


def test_a_gpu_whose_node_is_unknown_is_named_under_the_drawing():
    import matplotlib.pyplot as plt

    topo = _two_node_topo([GPU(0, "0000:18:00.0", 0, [0, 1, 2, 3], "NVIDIA"), GPU(1, "0000:3b:00.0", None, [], "NVIDIA")])
    fig = plots.draw_topology(topo, title="one orphan")
    try:
        texts = [t.get_text() for ax in fig.axes for t in ax.texts]
        assert "GPUs with unknown node: GPU1" in texts
    finally:
        plt.close(fig)
