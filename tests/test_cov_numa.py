"""NUMA's edges on a one-node machine: the local-vs-remote measurement run through a stand-in
numactl on a two-node topology, the bound launcher's numactl and fallback paths, and the planner's
refusals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perflab.core.errors import InputError
from perflab.numa import effect, plan
from perflab.numa.topology import Node, Topology

ROOT = Path(__file__).resolve().parents[1]


def _two_nodes() -> Topology:
    cpus = sorted(os.sched_getaffinity(0))
    return Topology(nodes=[Node(0, cpus[:1], 2**30), Node(1, cpus[1:] or cpus[:1], 2**30)],
                    distances=[[10, 21], [21, 10]], gpus=[], affinity=cpus)


@pytest.fixture
def fake_numactl(tmp_path, monkeypatch):
    """A numactl that drops its binding options and runs the command: the plumbing around it is
    what is under test on a one-node machine, not the binding."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "numactl"
    script.write_text('#!/bin/sh\necho "numactl $*" >> "$NUMACTL_LOG"\n'
                      'while [ $# -gt 0 ]; do case "$1" in --*) shift;; *) break;; esac; done\nexec "$@"\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NUMACTL_LOG", str(tmp_path / "numactl.log"))
    return tmp_path / "numactl.log"


def test_one_node_and_no_numactl_are_said(monkeypatch):
    one = Topology(nodes=[Node(0, [0], None)], distances=[[10]], gpus=[], affinity=[0])
    assert "1 NUMA node with CPUs" in effect.memory_local_vs_remote(one)["skipped"]
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert "numactl is not installed" in effect.skip_reason(_two_nodes())


def test_local_vs_remote_measures_each_memory_node(fake_numactl):
    assert effect.skip_reason(_two_nodes()) is None
    out = effect.memory_local_vs_remote(_two_nodes(), nbytes=8 * 2**20)
    rows = out["rows"]
    assert [(r["cpu_node"], r["memory_node"]) for r in rows] == [(0, 0), (0, 1)]
    assert all(r["gbps"] > 0 and r["ns_per_random_read"] > 0 for r in rows), rows
    calls = [c.split()[1:3] for c in fake_numactl.read_text().splitlines() if c.startswith("numactl ")]
    first = min(os.sched_getaffinity(0))  # node 0's first CPU, for both: only the memory moves
    assert calls == [[f"--physcpubind={first}", "--membind=0"], [f"--physcpubind={first}", "--membind=1"]], calls


def _bound(tmp_path, env_extra, target):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env_extra}
    return subprocess.run([sys.executable, "-m", "perflab.numa.bound", str(target)], env=env,
                          capture_output=True, text=True, timeout=60)


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


def test_bound_without_a_target_prints_its_usage():
    from perflab.numa import bound

    with pytest.raises(SystemExit, match="usage: python -m perflab.numa.bound TARGET"):
        bound.main([])


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
