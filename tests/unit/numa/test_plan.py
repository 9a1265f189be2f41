"""Tests of `perflab.numa.plan`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import perflab

from perflab.core.errors import InputError
from perflab.numa import plan
from perflab.numa.plan import bind_rank, check_plan
from perflab.numa.smi_topo import (
    parse_topo,
    topology_from_topo,
)
from perflab.numa.topology import Node, Topology, format_cpulist, read_topology

from .helpers import TOPO, _two_nodes, fake_sysfs


def _sysfs(root: Path, nodes: dict[int, list[int]], siblings: dict[int, list[int]]) -> Path:

    cpus = sorted(c for v in nodes.values() for c in v)
    (root / "devices/system/cpu").mkdir(parents=True)
    (root / "devices/system/cpu/online").write_text(format_cpulist(cpus) + "\n")
    for c in cpus:
        d = root / f"devices/system/cpu/cpu{c}/topology"
        d.mkdir(parents=True)
        d.joinpath("thread_siblings_list").write_text(format_cpulist(siblings[c]) + "\n")
    for n, cs in nodes.items():
        d = root / f"devices/system/node/node{n}"
        d.mkdir(parents=True)
        d.joinpath("cpulist").write_text(format_cpulist(cs) + "\n")
    return root


ROOT = Path(__file__).resolve().parents[3]


def _bound(tmp_path, env_extra, target):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env_extra}
    return subprocess.run([sys.executable, "-m", "perflab.numa.bound", str(target)], env=env,
                          capture_output=True, text=True, timeout=60)


def test_blank_affinity_cells_never_move_a_rank_off_its_gpus_node(tmp_path):
    """The SLURM-launched H200 table: GPU0-3's CPU Affinity is blank and GPU4-7's is 56 (the job step
    could use CPU 56 alone, on node 1); the NUMA column says node 0 for GPU0. Rank 0 must not be bound
    to CPU 56: it is bound by node."""
    from perflab.numa.plan import bind_rank

    name = TOPO / "published_h200_slurm_blank_cpu.txt"
    t = parse_topo(name.read_text())
    topo = topology_from_topo(t, sysfs=None)
    assert topo.unknown_cpus == [0] and any("--cpunodebind=0" in n for n in topo.notes)
    (r0,) = plan.plan(1, topo)
    assert (r0.gpu, r0.node, r0.cpus) == (0, 0, []) and r0.numactl == "numactl --cpunodebind=0 --membind=0"
    assert not check_plan([r0], topo)
    with pytest.raises(InputError, match="CPUs are unknown.*--cpunodebind=0"):
        bind_rank(r0)
    r = perflab("numa", "--plan", "--nproc", "1", "--topo", str(name), "--json")
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout)[0]
    assert row["node"] == 0 and row["cpus"] == [] and "cpunodebind=0" in row["numactl"]
    # on the machine itself (its sysfs), node 0's CPUs are read from there
    nodes = {0: list(range(0, 56)) + list(range(112, 168)), 1: list(range(56, 112)) + list(range(168, 224))}
    root = _sysfs(tmp_path / "sys", nodes, {c: [c] for c in range(224)})
    here = topology_from_topo(t, sysfs=root)
    assert here.unknown_cpus == [] and here.nodes[0].cpus == nodes[0]
    (r0,) = plan.plan(1, here)
    assert r0.node == 0 and set(r0.cpus) <= set(nodes[0]) and r0.cpus


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


def test_bound_runs_the_rank_under_numactl(tmp_path, fake_numactl):
    target = tmp_path / "rank.py"
    target.write_text("print('rank body ran')\n")
    r = _bound(tmp_path, {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}, target)
    assert r.returncode == 0, r.stderr
    assert "[perflab.numa.bound] rank 0: numactl --physcpubind=" in r.stdout and "rank body ran" in r.stdout


def test_bound_runs_unbound_when_the_plan_is_impossible(tmp_path):
    target = tmp_path / "rank.py"
    target.write_text("import sys\nprint('args', sys.argv[1:])\n")
    r = _bound(tmp_path, {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4096"}, target)
    assert r.returncode == 0, r.stderr
    assert "rank 0: not bound (4096 ranks need 4096 CPUs of their own" in r.stdout and "args []" in r.stdout


def test_planner_refusals_and_rank_problems():
    empty = Topology(nodes=[Node(0, [], None)], distances=[[10]], gpus=[], affinity=[])
    with pytest.raises(InputError, match="no usable CPU in this topology"):
        plan.plan(1, empty)
    topo = _two_nodes()
    cpu = topo.nodes[0].cpus[0]
    bad = [plan.RankPlan(0, None, 0, [cpu, 9999]), plan.RankPlan(1, None, 0, [cpu]), plan.RankPlan(2, None, 1, [])]
    assert plan.check_plan(bad, topo) == ["rank 0 gets CPU 9999, which is not in the topology",
                                          f"CPU {cpu} is given to ranks 0 and 1", "rank 2 gets no CPU"]
    assert plan.check_plan(plan.plan(2, topo), topo) == []


def test_more_ranks_than_cores_share_cores_thread_by_thread():
    siblings = {0: [0, 2], 2: [0, 2], 1: [1, 3], 3: [1, 3]}  # 2 cores, 2 threads each
    assert plan.split_node([0, 1, 2, 3], 2, siblings) == [[0, 2], [1, 3]]  # whole cores while they last
    assert plan.split_node([0, 1, 2, 3], 4, siblings) == [[0], [1], [2], [3]]  # then one thread each
    with pytest.raises(InputError, match="5 ranks need at least 5 CPUs; 4 are available"):
        plan.split_node([0, 1, 2, 3], 5, siblings)


def test_bound_binds_with_sched_setaffinity_and_runs_a_module(tmp_path):
    (tmp_path / "perflab_rank_mod.py").write_text("import os\nprint('module ran on', sorted(os.sched_getaffinity(0)))\n")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "PERFLAB_BIND_WITH": "sched_setaffinity"}
    r = subprocess.run([sys.executable, "-m", "perflab.numa.bound", "perflab_rank_mod"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "(node 0; sched_setaffinity)" in r.stdout and "module ran on" in r.stdout


def test_plan_never_shares_and_crosses_only_when_needed(tmp_path):
    t = read_topology(fake_sysfs(tmp_path, {0: "0-1", 1: "2-7"}, gpus=[(f"0000:0{i}:00.0", 0, "0-1") for i in range(3)]),
                      use_nvml=False)
    p = plan.plan(3, t)
    assert not check_plan(p, t)
    assert [x.node for x in p[:2]] == [0, 0] and p[2].node == 1 and "borrowed" in p[2].note
    with pytest.raises(InputError, match="use fewer ranks"):
        plan.plan(9, t)


def test_bind_rank_reports_no_change_when_already_there():
    cur = sorted(os.sched_getaffinity(0))
    from perflab.numa.plan import RankPlan

    assert bind_rank(RankPlan(0, None, 0, cur)).changed is False


def test_the_lessons_plan_check_tools_and_skipped_launch_read_as_text():
    from perflab.numa import panel

    server = panel.published().topology
    p = plan.plan(8, server)
    assert plan.check_text(p, server) == ("checked: 8 ranks, no CPU given twice, every CPU in the topology, every rank "
                                         "on its GPU's node")
    twice = [p[0], plan.RankPlan(1, p[1].gpu, p[1].node, p[0].cpus[:1], "")]
    assert plan.check_text(twice, server).startswith("the plan has problems: CPU 0 is given to ranks 0 and 1")
    assert list(plan.tools_table().index) == ["numactl", "lstopo", "nvidia-smi"]
    assert plan.launch_bound(2, run=False).text().startswith("smoke mode: the torchrun launch")
    b = plan.Binding(1, "0-1", "1", True, ["1", "1"])
    assert list(b.table()["who"]) == ["the rank, before", "the rank, after", "DataLoader worker 0", "DataLoader worker 1"]
