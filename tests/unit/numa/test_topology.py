"""Tests of `perflab.numa.topology`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from clirun import perflab
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from perflab.core.errors import InputError
from perflab.core.jsonable import to_json
from perflab.numa import effect, plan, plots, topology
from perflab.numa.plan import check_plan
from perflab.numa.smi_topo import parse_topo
from perflab.numa.topology import GPU, Node, Topology, format_cpulist, parse_cpulist, read_topology
from perflab.tune import ladder, runner

from .helpers import SMI_4, _two_nodes, fake_sysfs


def _two_node_topo(gpus: list[GPU]) -> Topology:
    return Topology(nodes=[Node(0, [0, 1, 2, 3], None), Node(1, [4, 5, 6, 7], None)],
                    distances=[[10, 21], [21, 10]], gpus=gpus, affinity=list(range(8)))


def two_socket_8gpu(root):
    smt = {c: f"{c % 104},{c % 104 + 104}" for c in range(208)}
    gpus = [(f"0000:{0x18 + 16 * i:02x}:00.0", 0 if i < 4 else 1, "0-51,104-155" if i < 4 else "52-103,156-207")
            for i in range(8)]
    return fake_sysfs(root, {0: "0-51,104-155", 1: "52-103,156-207"}, smt=smt, gpus=gpus)


def _cli(*args):
    return perflab("numa", *args)


pytest.importorskip("hypothesis", reason="hypothesis is not installed: pip install -e '.[test]'")


SETTINGS = settings(max_examples=60, deadline=None, database=None,  # no .hypothesis folder in the checkout
                    suppress_health_check=[HealthCheck.too_slow])


LINKS = ["NV1", "NV4", "NV12", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"]


@st.composite
def tables(draw):
    n_gpu = draw(st.integers(1, 8))
    n_nic = draw(st.integers(0, 3))
    numa_cols = draw(st.booleans())
    devs = [f"GPU{i}" for i in range(n_gpu)] + [f"NIC{i}" for i in range(n_nic)]
    links = {}
    for i, a in enumerate(devs):
        for b in devs[i:]:
            v = "X" if a == b else draw(st.sampled_from(LINKS))
            links.setdefault(a, {})[b] = v
            links.setdefault(b, {})[a] = v
    gpus = []
    for g in range(n_gpu):
        kind = draw(st.sampled_from(["list", "list", "blank", "na"]))
        cpus = sorted(draw(st.sets(st.integers(0, 255), min_size=1, max_size=40))) if kind == "list" else []
        numa = draw(st.one_of(st.none(), st.integers(0, 7))) if numa_cols else None
        gpus.append({"gpu": g, "cpu_affinity": cpus, "numa_node": numa, "_cpu_text": "N/A" if kind == "na" else
                     format_cpulist(cpus)})
    return devs, links, gpus, numa_cols


def render(devs, links, gpus, numa_cols) -> str:
    """As nvidia-smi writes it: tab-separated, a leading tab on the header, two tabs after the NUMA value."""
    extra = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"] if numa_cols else ["CPU Affinity"]
    out = ["\t" + "\t".join(devs + extra)]
    for d in devs:
        cells = [d] + [" X " if links[d][e] == "X" else links[d][e] for e in devs]
        if d.startswith("GPU"):
            g = gpus[int(d[3:])]
            cells.append(g["_cpu_text"])
            if numa_cols:
                cells += ["N/A" if g["numa_node"] is None else str(g["numa_node"]), "", "N/A"]
        out.append("\t".join(cells))
    return "\n".join(out) + "\n\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe and the SMP interconnect\n"


def layouts(text: str) -> dict[str, str]:
    spaces = "\n".join(ln.expandtabs(8).rstrip() for ln in text.splitlines()) + "\n"
    first, rest = text.split("\n", 1)
    return {"tabs": text, "spaces": spaces,
            "ansi": "\x1b[1m\x1b[4m" + first + "\x1b[0m\n" + rest,
            "ansi_spaces": "\x1b[4m" + spaces.split("\n", 1)[0] + "\x1b[0m\n" + spaces.split("\n", 1)[1],
            "crlf": text.replace("\n", "\r\n"), "prompt": "me@box:~$ nvidia-smi topo -m\n" + text}


CPU = torch.device("cpu")


def test_nvml_and_sysfs_bus_ids_compare_equal():
    """NVML writes an 8-digit PCI domain, sysfs a 4-digit one: the same GPU either way."""
    assert topology._bus_key("00000000:18:00.0") == topology._bus_key("0000:18:00.0") == "0000:18:00.0"
    assert topology._bus_key("00000000:3B:00.0") != topology._bus_key("0000:18:00.0")


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
    rows = effect.memory_local_vs_remote(two, nbytes=2**20).rows
    assert [r.error for r in rows] == ["numactl: node 1 has no memory"] * 2
    assert effect.remote_over_local(rows, "gbps") is None
    lat, _ = effect.measured_tables(rows)
    assert set(lat.values()) == {"failed: numactl: node 1 has no memory"}


def test_a_gpu_whose_node_is_unknown_is_named_under_the_drawing():
    import matplotlib.pyplot as plt

    topo = _two_node_topo([GPU(0, "0000:18:00.0", 0, [0, 1, 2, 3], "NVIDIA"), GPU(1, "0000:3b:00.0", None, [], "NVIDIA")])
    fig = plots.draw_topology(topo, title="one orphan")
    try:
        texts = [t.get_text() for ax in fig.axes for t in ax.texts]
        assert "GPUs with unknown node: GPU1" in texts
    finally:
        plt.close(fig)


def test_one_node_and_no_numactl_are_said(monkeypatch):
    one = Topology(nodes=[Node(0, [0], None)], distances=[[10]], gpus=[], affinity=[0])
    skipped = effect.memory_local_vs_remote(one)
    assert skipped.rows == [] and "1 NUMA node with CPUs" in str(skipped.skipped)
    assert skipped.to_json() == {"skipped": skipped.skipped}
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert "numactl is not installed" in effect.skip_reason(_two_nodes())


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
    p = plan.plan(8, t)
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
    p = plan.plan(2, t)
    assert p[0].node == 1 and "no CPUs" in p[0].note  # node 2's nearest node with CPUs is 1 (distance 12)
    assert p[1].node == 0 and not check_plan(p, t)


def test_offline_cpus_and_unknown_numa_node(tmp_path):
    root = fake_sysfs(tmp_path, {0: "0-3", 1: "4-7"}, online="0-2,4-7", gpus=[("0000:01:00.0", -1, "4-7")])
    t = read_topology(root, use_nvml=False)
    assert t.nodes[0].cpus == [0, 1, 2]  # cpu 3 is offline
    assert t.gpus[0].numa_node is None
    p = plan.plan(1, t)
    assert p[0].node == 1 and "unknown" in p[0].note  # found through its local CPUs


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
print(json.dumps({"after": done.after, "changed": done.changed, "workers": workers, "cpu": cpu}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["after"] == str(d["cpu"])
    assert d["workers"] == [[d["cpu"]], [d["cpu"]]]  # forked workers kept the rank's binding


@SETTINGS
@given(tables())
def test_topology_tables_round_trip_in_every_layout(t):
    devs, links, gpus, numa_cols = t
    want = [{k: v for k, v in g.items() if not k.startswith("_")} for g in gpus]
    for name, text in layouts(render(devs, links, gpus, numa_cols)).items():
        got = parse_topo(text)
        assert got.devices == devs, name
        assert got.links == links, name
        assert to_json(got.gpus) == want, (name, text)


def test_numa_rung_is_not_applicable_on_one_node(monkeypatch):
    from perflab.numa import topology

    one = topology.Topology([topology.Node(0, [0, 1], None)], [[10]], [], [0, 1])
    monkeypatch.setattr(topology, "read_topology", lambda *a, **k: one)
    ch = runner.apply_rung("numa", runner.StepConfig(), ladder.preset("smoke"), CPU, [])
    assert not ch.applicable and "one NUMA node" in ch.note
    two = topology.Topology([topology.Node(0, [0], None), topology.Node(1, [1], None)], [[10, 20], [20, 10]], [], [0, 1])
    monkeypatch.setattr(topology, "read_topology", lambda *a, **k: two)
    assert runner.apply_rung("numa", runner.StepConfig(), ladder.preset("smoke"), CPU, []).config.numa_node == 0


def test_the_lessons_node_table_and_description():
    from perflab.numa.topology import GPU, Node, Topology

    t = Topology([Node(0, [0, 1, 2, 3], 16 * 2**30), Node(1, [], None)], [[10, 21], [21, 10]],
                 [GPU(0, "0000:17:00.0", 0, [0, 1, 2, 3])], [0, 1])
    nodes = t.nodes_table()
    assert nodes.loc[0, "CPUs"] == "0-3" and nodes.loc[0, "memory"] == "16.0 GiB" and nodes.loc[1, "memory"] == "not reported"
    assert t.describe().splitlines() == ["distances: [[10, 21], [21, 10]]", "GPUs: [(0, '0000:17:00.0', 0, '0-3')]",
                                         "this process may run on CPUs 0-1"]
