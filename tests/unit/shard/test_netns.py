"""Tests of `perflab.shard.netns`."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import psutil
import pytest
from clirun import perflab

from perflab.core.errors import PerflabError
from perflab.shard import netns


# ----------------------------------------------------------------------------- shard: the two-node launch
def _fake_nodes(monkeypatch, commands):
    """two_node_launch with its namespaces faked: node i runs commands[i], with no `ip` and no root."""
    from perflab.shard import netns

    deleted = []
    monkeypatch.setattr(netns, "unavailable", lambda: None)
    monkeypatch.setattr(netns, "create", lambda tag: ([f"perflab-{tag}-0", f"perflab-{tag}-1"], ["lo", "lo"]))
    monkeypatch.setattr(netns, "delete", deleted.append)
    monkeypatch.setattr(netns, "node_command", lambda ns, node, nproc, rdzv_id, agent=None: commands[node])
    return netns, deleted


def _record(rank: int) -> str:
    import json

    rec = {"RANK": rank, "LOCAL_RANK": rank % 2, "GROUP_RANK": rank // 2, "WORLD_SIZE": 4, "all_reduce": 6.0}
    return "PERFLAB_RESULT " + json.dumps({"rank": rank, "result": rec})


class _ShortGrace(subprocess.Popen):
    """Popen whose waits last at most 0.2 s: the launch's 2 s grace after SIGTERM, shortened. A node
    started through `sh` ignores SIGTERM from before its first instruction (set in the child before
    the exec, so a signal sent at once cannot find it still unprotected), as a hung rank might."""

    def __init__(self, args, *a, **kw):
        if args and args[0] == "sh":
            kw["preexec_fn"] = lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN)
        super().__init__(args, *a, **kw)

    def wait(self, timeout=None):
        return super().wait(timeout=None if timeout is None else min(timeout, 0.2))


def test_a_result_record_cut_by_another_ranks_output_is_not_counted(monkeypatch):
    cut = _record(0)[:40]  # rank 0's record, cut mid-way by rank 1's on the same line
    node0 = f"[rank0] starting\n{cut}{_record(1)}\nPERFLAB_RESULT [1, 2]\n"
    node1 = f"{_record(2)}\n{_record(3)} and more output\nPERFLAB_RESULT {{\"rank\": 3}}\n"
    netns, deleted = _fake_nodes(monkeypatch, [["printf", "%s", node0], ["printf", "%s", node1]])
    res = netns.two_node_launch(nproc_per_node=2, timeout=30)
    assert [r["RANK"] for r in res.ranks] == [1, 2, 3]
    assert [r["namespace_node"] for r in res.ranks] == [0, 1, 1]
    assert res.returncodes == [0, 0] and not res.timed_out
    assert res.ok is False  # 3 whole records of the 4 ranks
    assert res.outputs == [node0, node1] and len(deleted) == 1 and len(deleted[0]) == 2


def test_nodes_past_the_timeout_are_stopped_and_one_that_ignores_sigterm_is_killed(monkeypatch):
    netns, deleted = _fake_nodes(monkeypatch, [["sleep", "30"], ["sh", "-c", "sleep 30"]])
    monkeypatch.setattr(subprocess, "Popen", _ShortGrace)
    res = netns.two_node_launch(nproc_per_node=2, timeout=0.05)
    assert res.timed_out and not res.ok and res.ranks == []
    assert res.returncodes == [-signal.SIGTERM, -signal.SIGKILL]
    assert len(deleted) == 1


def test_a_node_whose_process_group_is_gone_when_signalled_does_not_stop_the_launch(monkeypatch):
    netns, deleted = _fake_nodes(monkeypatch, [["sleep", "30"], ["sh", "-c", "sleep 30"]])
    monkeypatch.setattr(subprocess, "Popen", _ShortGrace)
    real_killpg = os.killpg
    sent = []

    def killpg(pgid, sig):  # the signal lands, then the group is reported gone (it exited meanwhile)
        sent.append(sig)
        real_killpg(pgid, sig)
        raise ProcessLookupError(3, "No such process")

    monkeypatch.setattr(os, "killpg", killpg)
    res = netns.two_node_launch(nproc_per_node=2, timeout=0.05)
    assert sent == [signal.SIGTERM, signal.SIGTERM, signal.SIGKILL]
    assert res.timed_out and res.returncodes == [-signal.SIGTERM, -signal.SIGKILL] and len(deleted) == 1


def test_tensor_parallel_llama_matches_the_unsharded_blocks():
    r = perflab("shard", "--strategy", "tp", "--nproc", "2", "--preset", "tiny-llama", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["ok"] and len(d["checks"]) == 7 and all(c["ok"] for c in d["checks"]), d["checks"]
    bwd = next(c for c in d["checks"] if c["name"] == "all-reduces per block (backward)")
    assert bwd["measured"] == bwd["predicted"] == [2] * 2  # the gated MLP's up and gate: still one
    outputs = next(c for c in d["checks"] if c["name"] == "outputs vs the unsharded blocks")
    assert float(outputs["measured"]) < 1e-4


@pytest.mark.parametrize("platform, euid, ip, why", [
    ("darwin", 0, "/sbin/ip", "network namespaces are a Linux feature"),
    ("linux", 1000, "/sbin/ip", "needs root"),
    ("linux", 0, None, "iproute2"),
])
def test_two_node_launch_says_why_it_cannot_run(monkeypatch, platform, euid, ip, why):
    monkeypatch.setattr(netns.sys, "platform", platform)
    monkeypatch.setattr(netns.os, "geteuid", lambda: euid)
    monkeypatch.setattr(netns.shutil, "which", lambda name: ip)
    assert why in netns.unavailable()
    with pytest.raises(PerflabError, match=f"cannot run the two-node launch here: .*{why}"):
        netns.two_node_launch()


def test_a_failing_ip_command_is_one_line():
    if netns.unavailable() and "iproute2" in netns.unavailable():
        pytest.skip("no ip command here")
    with pytest.raises(PerflabError, match="ip link show perflab-no-such-link failed: "):
        netns._ip("link", "show", "perflab-no-such-link")


@pytest.mark.slow
@pytest.mark.skipif(netns.unavailable() is not None, reason=f"two-node launch: {netns.unavailable()}")
def test_two_namespaced_nodes_rendezvous_and_all_reduce():
    before = set(netns.namespaces_left())
    res = netns.two_node_launch(nproc_per_node=2)
    assert res.ok, "\n".join(o[-2000:] for o in res.outputs)
    ranks = res.ranks
    assert [r["RANK"] for r in ranks] == [0, 1, 2, 3]
    assert all(r["WORLD_SIZE"] == 4 and r["LOCAL_WORLD_SIZE"] == 2 and r["all_reduce"] == 6.0 for r in ranks)
    assert all(r["RANK"] == r["GROUP_RANK"] * 2 + r["LOCAL_RANK"] for r in ranks)
    by_node = {}
    for r in ranks:
        by_node.setdefault(r["namespace_node"], set()).add(r["GROUP_RANK"])
    assert sorted(len(v) for v in by_node.values()) == [1, 1]  # each namespace is one node
    assert all(r["master_addr"] in netns.ADDRESSES for r in ranks)
    assert set(netns.namespaces_left()) <= before  # both namespaces deleted
    for r in ranks:
        assert not psutil.pid_exists(r["pid"]) or psutil.Process(r["pid"]).status() == psutil.STATUS_ZOMBIE


def test_the_ranks_table_shows_torchruns_numbers_in_order():
    run = netns.TwoNodeRun(True, False, [0, 0], 3.0, [{"RANK": r, "GROUP_RANK": r // 2, "LOCAL_RANK": r % 2,
                                                         "LOCAL_WORLD_SIZE": 2, "WORLD_SIZE": 4, "all_reduce": 6.0,
                                                         "master_addr": "10.201.0.1", "namespace_node": r // 2}
                                                        for r in range(4)], ["", ""], [], [], [])
    table = run.table()
    assert list(table.columns) == ["RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE", "all_reduce",
                                   "master_addr"]
    assert list(table["GROUP_RANK"]) == [0, 0, 1, 1] and set(table["master_addr"]) == {"10.201.0.1"}
