"""Lesson 08's readers, parser and planner, on fake sysfs trees and on `nvidia-smi topo -m` tables
(the handbook's 8×H100 table among them), and binding on this machine."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import perflab

from perflab.core.errors import InputError
from perflab.numa import lab08
from perflab.numa.plan import bind_rank, check_plan, plan, split_node
from perflab.numa.smi_topo import infer_smt, parse_topo, topology_from_topo
from perflab.numa.topology import format_cpulist, parse_cpulist, read_topology

SEED = json.loads((Path(__file__).parents[1] / "perflab/numa/data/published_topologies.json").read_text())


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


def two_socket_8gpu(root):
    smt = {c: f"{c % 104},{c % 104 + 104}" for c in range(208)}
    gpus = [(f"0000:{0x18 + 16 * i:02x}:00.0", 0 if i < 4 else 1, "0-51,104-155" if i < 4 else "52-103,156-207")
            for i in range(8)]
    return fake_sysfs(root, {0: "0-51,104-155", 1: "52-103,156-207"}, smt=smt, gpus=gpus)


def test_cpulists_round_trip_and_bad_text():
    assert parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("0-51,104-155")[-1] == 155 and len(parse_cpulist("0-51,104-155")) == 104
    assert parse_cpulist("") == [] and parse_cpulist("N/A") == []
    assert format_cpulist([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    for bad in ("0-", "a", "3-1"):
        with pytest.raises(InputError, match="CPU list"):
            parse_cpulist(bad)


def test_one_node(tmp_path):
    t = read_topology(fake_sysfs(tmp_path, {0: "0-3"}))
    assert [(n.id, n.cpus, n.memory_bytes) for n in t.nodes] == [(0, [0, 1, 2, 3], 64 * 2**30)]
    assert t.distances == [[10]] and t.gpus == []


def test_two_nodes_eight_gpus(tmp_path):
    t = read_topology(two_socket_8gpu(tmp_path), use_nvml=False)
    assert [len(n.cpus) for n in t.nodes] == [104, 104] and t.distances == [[10, 21], [21, 10]]
    assert [g.numa_node for g in t.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]  # the NIC is not a GPU
    assert t.siblings[3] == [3, 107]
    p = plan(8, t)
    assert not check_plan(p, t)
    assert [x.node for x in p] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(len(x.cpus) == 26 for x in p)  # 208 hardware threads / 8 GPUs, as the handbook counts
    assert p[0].cpus[:13] == list(range(13)) and p[0].cpus[13:] == list(range(104, 117))  # cores, then siblings
    assert p[0].numactl == "numactl --physcpubind=0-12,104-116 --membind=0"


def test_a_node_without_cpus_lends_the_nearest(tmp_path):
    root = fake_sysfs(tmp_path, {0: "0-7", 1: "8-15", 2: ""}, gpus=[("0000:01:00.0", 2, ""), ("0000:02:00.0", 0, "0-7")],
                      distances=[[10, 20, 30], [20, 10, 12], [30, 12, 10]])
    t = read_topology(root, use_nvml=False)
    assert t.nodes[2].cpus == []
    p = plan(2, t)
    assert p[0].node == 1 and "no CPUs" in p[0].note  # node 2's nearest node with CPUs is 1 (distance 12)
    assert p[1].node == 0 and not check_plan(p, t)


def test_offline_cpus_and_unknown_numa_node(tmp_path):
    root = fake_sysfs(tmp_path, {0: "0-3", 1: "4-7"}, online="0-2,4-7", gpus=[("0000:01:00.0", -1, "4-7")])
    t = read_topology(root, use_nvml=False)
    assert t.nodes[0].cpus == [0, 1, 2]  # cpu 3 is offline
    assert t.gpus[0].numa_node is None
    p = plan(1, t)
    assert p[0].node == 1 and "unknown" in p[0].note  # found through its local CPUs


def test_plan_never_shares_and_crosses_only_when_needed(tmp_path):
    t = read_topology(fake_sysfs(tmp_path, {0: "0-1", 1: "2-7"}, gpus=[(f"0000:0{i}:00.0", 0, "0-1") for i in range(3)]),
                      use_nvml=False)
    p = plan(3, t)
    assert not check_plan(p, t)
    assert [x.node for x in p[:2]] == [0, 0] and p[2].node == 1 and "borrowed" in p[2].note
    with pytest.raises(InputError, match="use fewer ranks"):
        plan(9, t)


def test_split_node_rules_hold_on_every_lab_case():
    for _, cpus, n, sib in lab08.CASES:
        assert lab08.rule_problems(split_node(cpus, n, sib), cpus, n, sib) == []


def test_lab_check_grades():
    from test_mutants_lab08 import (
        reference,  # the rule written out: calling plan.split_node is refused
    )

    assert lab08.check_split_node(reference)
    with pytest.raises(lab08.LabCheckError, match="perflab's own"):
        lab08.check_split_node(split_node)
    assert not lab08.check_split_node(lambda cpus, n, sib: (_ for _ in ()).throw(NotImplementedError()))
    with pytest.raises(lab08.LabCheckError, match="rule 1"):
        lab08.check_split_node(lambda cpus, n, sib: [part[:-1] if r == n - 1 else part
                                                     for r, part in enumerate(reference(cpus, n, sib))])
    with pytest.raises(lab08.LabCheckError, match="rule [235]"):  # round-robin: cores split, not neighbours
        lab08.check_split_node(lambda cpus, n, sib: [cpus[r::n] for r in range(n)])


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


def test_parse_the_handbooks_table():
    t = parse_topo(SEED["h100_8gpu_2socket"]["table"])
    assert [g["numa_node"] for g in t["gpus"]] == [0] * 4 + [1] * 4
    assert t["gpus"][0]["cpu_affinity"] == list(range(52)) + list(range(104, 156))
    assert t["links"]["GPU0"]["GPU0"] == "X" and t["links"]["GPU3"]["GPU7"] == "NV18"
    topo = topology_from_topo(t)
    assert topo.siblings[0] == [0, 104]  # inferred from the numbering
    p = plan(8, topo)
    assert not check_plan(p, topo) and [len(x.cpus) for x in p] == [26] * 8


def test_parse_a_4_gpu_table_with_nic_and_na():
    t = parse_topo(SMI_4)
    assert t["devices"] == ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0"] and t["nics"] == ["NIC0"]
    assert t["gpus"][3] == {"gpu": 3, "cpu_affinity": [], "numa_node": None}
    assert t["links"]["GPU0"]["NIC0"] == "PIX" and t["legend"]["NV#"].startswith("Connection traversing a bonded")
    assert t["nic_names"] == {"NIC0": "mlx5_0"}
    topo = topology_from_topo(t)
    assert [n.id for n in topo.nodes] == [0, 1] and infer_smt(topo.nodes)[0] == [0]
    p = plan(4, topo)
    assert not check_plan(p, topo) and p[3].note  # GPU3's node is unknown


def test_parse_rejects_what_is_not_a_table():
    with pytest.raises(InputError, match="header"):
        parse_topo("hello\nworld\n")


def _cli(*args):
    return perflab("numa", *args)


def test_cli_on_this_machine_agrees_with_affinity_and_lscpu():
    r = _cli("--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["affinity"] == sorted(os.sched_getaffinity(0))
    online = sorted(c for n in d["nodes"] for c in n["cpus"])
    lscpu = subprocess.run(["lscpu", "-p=CPU,NODE"], capture_output=True, text=True)
    if lscpu.returncode == 0:
        rows = [ln.split(",") for ln in lscpu.stdout.splitlines() if ln and not ln.startswith("#")]
        assert online == sorted(int(c) for c, _ in rows)
        by_node = {}
        for c, node in rows:
            by_node.setdefault(int(node or 0), []).append(int(c))
        assert {n["id"]: n["cpus"] for n in d["nodes"]} == {k: sorted(v) for k, v in by_node.items()}
    else:
        assert online == list(range(os.cpu_count()))


def test_cli_fake_trees_topo_and_plan(tmp_path):
    root = two_socket_8gpu(tmp_path / "sys")
    d = json.loads(_cli("--sysfs", str(root), "--json").stdout)
    assert len(d["nodes"]) == 2 and [g["numa_node"] for g in d["gpus"]] == [0] * 4 + [1] * 4
    f = tmp_path / "topo.txt"
    f.write_text(SMI_4)
    d = json.loads(_cli("--topo", str(f), "--json").stdout)
    assert d["gpus"][2] == {"gpu": 2, "cpu_affinity": list(range(16, 32)), "numa_node": 1} and "links" in d
    rows = json.loads(_cli("--plan", "--nproc", "8", "--sysfs", str(root), "--json").stdout)
    assert [r["rank"] for r in rows] == list(range(8)) and set(rows[0]) >= {"rank", "gpu", "node", "cpus", "numactl"}
    bad = _cli("--plan", "--nproc", "3", "--topo", str(tmp_path / "missing.txt"))
    assert bad.returncode == 2 and "no such file" in bad.stderr and "Traceback" not in bad.stderr


def test_bind_changes_affinity_and_dataloader_workers_inherit_it():
    code = r"""
import json, os
from perflab.numa.plan import RankPlan, bind_rank
import torch
from torch.utils.data import DataLoader, Dataset
class Aff(Dataset):
    def __len__(self): return 2
    def __getitem__(self, i): return torch.tensor(sorted(os.sched_getaffinity(0)))
cpu = min(os.sched_getaffinity(0))
done = bind_rank(RankPlan(0, None, 0, [cpu]))
workers = [b.tolist() for b in DataLoader(Aff(), batch_size=None, num_workers=2)]
print(json.dumps({"done": done, "workers": workers, "cpu": cpu}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["done"]["after"] == str(d["cpu"])
    assert d["workers"] == [[d["cpu"]], [d["cpu"]]]  # forked workers kept the rank's binding


def test_launcher_binds_every_rank():
    from perflab.distributed.torchrun import launch

    n = min(2, len(os.sched_getaffinity(0)))
    res = launch("perflab.distributed.workers.faulty", n, ["--work-s", "0.01"], timeout=120, bind=True)
    assert res.ok, res.report()
    outs = [r.stdout for r in res.ranks]
    assert all("[perflab.numa.bound] rank" in o for o in outs), outs
    cpus = [o.split("→ ")[1].split(" ")[0] if "→" in o else o.split("--physcpubind=")[1].split()[0] for o in outs]
    assert len(set(cpus)) == n  # no two ranks on the same cores


def test_bind_rank_reports_no_change_when_already_there():
    cur = sorted(os.sched_getaffinity(0))
    from perflab.numa.plan import RankPlan

    assert bind_rank(RankPlan(0, None, 0, cur))["changed"] is False


def test_remote_over_local_reads_measured_rows_and_published_matrices():
    from perflab.numa import effect

    rows = [{"cpu_node": 0, "memory_node": 0, "ns": 100.0}, {"cpu_node": 0, "memory_node": 1, "ns": 150.0},
            {"cpu_node": 0, "memory_node": 2, "error": "numactl: no such node"},
            {"cpu_node": 1, "memory_node": 1, "ns": 50.0}, {"cpu_node": 1, "memory_node": 0, "ns": True}]
    # local mean (100 + 50) / 2 = 75, remote 150 (the failed and non-numeric rows left out)
    assert effect.remote_over_local(rows, "ns") == pytest.approx(2.0)
    assert effect.remote_over_local(rows[:1], "ns") is None            # no remote row
    assert effect.remote_over_local(rows[1:3], "ns") is None           # no local row
    assert effect.remote_over_local([{"ns": 1.0}], "ns") is None        # rows with no nodes
    assert effect.remote_over_local([], "ns") is None


def test_measured_tables_label_each_row_and_say_why_one_failed():
    from perflab.numa import effect

    lat, bw = effect.measured_tables([
        {"cpu_node": 0, "memory_node": 0, "gbps": 12.345, "ns_per_random_read": 3.21},
        {"cpu_node": 0, "memory_node": 1, "error": "numactl: node 1 has no memory"}])
    assert lat == {"cores on node 0, memory on node 0 (local)": "3.2 ns per independent random read",
                   "cores on node 0, memory on node 1 (remote)": "failed: numactl: node 1 has no memory"}
    assert bw["cores on node 0, memory on node 0 (local)"] == "12 GB/s copy (read + write), one core"
    assert effect.measured_tables([]) == ({}, {})
