"""Tests of `perflab.numa.effect`."""

from __future__ import annotations

import os

import pytest

from perflab.numa import effect

from .helpers import _two_nodes


# ----------------------------------------------------------------------------- the report
def _cpu_ctx(quick: bool):
    import torch

    from perflab.core.device import DeviceInfo
    from perflab.course import report as R

    return R.Ctx(torch.device("cpu"), DeviceInfo("cpu", "test cpu"), quick)


def test_the_full_numa_part_measures_local_vs_remote_where_there_are_two_nodes(monkeypatch):
    from perflab.course import report as R
    from perflab.numa import effect

    seen = []
    monkeypatch.setattr(effect, "skip_reason", lambda topo: None)
    monkeypatch.setattr(effect, "memory_local_vs_remote",
                        lambda topo, nbytes: seen.append(nbytes) or {"local_gbps": 10.0, "remote_gbps": 6.0})
    out = R.part_numa(_cpu_ctx(quick=False))
    assert seen == [256 * 2**20] and out.notes == []
    assert out.data["local_vs_remote"] == {"local_gbps": 10.0, "remote_gbps": 6.0}


def test_local_vs_remote_measures_each_memory_node(fake_numactl):
    assert effect.skip_reason(_two_nodes()) is None
    out = effect.memory_local_vs_remote(_two_nodes(), nbytes=8 * 2**20)
    rows = out.rows
    assert out.skipped is None and [(r.cpu_node, r.memory_node) for r in rows] == [(0, 0), (0, 1)]
    assert all(r.gbps and r.gbps > 0 and r.ns_per_random_read and r.ns_per_random_read > 0 for r in rows), rows
    assert out.to_json()["rows"][0].keys() == {"cpu_node", "memory_node", "gbps", "ns_per_random_read", "check"}
    calls = [c.split()[1:3] for c in fake_numactl.read_text().splitlines() if c.startswith("numactl ")]
    first = min(os.sched_getaffinity(0))  # node 0's first CPU, for both: only the memory moves
    assert calls == [[f"--physcpubind={first}", "--membind=0"], [f"--physcpubind={first}", "--membind=1"]], calls


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
    measured = [effect.MemoryRow(0, 0, gbps=20.0), effect.MemoryRow(0, 1, gbps=10.0),
                effect.MemoryRow(0, 2, error="numactl: no such node")]
    assert effect.remote_over_local(measured, "gbps") == pytest.approx(0.5)


def test_measured_tables_label_each_row_and_say_why_one_failed():
    from perflab.numa import effect

    lat, bw = effect.measured_tables([
        effect.MemoryRow(0, 0, gbps=12.345, ns_per_random_read=3.21),
        effect.MemoryRow(0, 1, error="numactl: node 1 has no memory")])
    assert lat == {"cores on node 0, memory on node 0 (local)": "3.2 ns per independent random read",
                   "cores on node 0, memory on node 1 (remote)": "failed: numactl: node 1 has no memory"}
    assert bw["cores on node 0, memory on node 0 (local)"] == "12 GB/s copy (read + write), one core"
    assert effect.measured_tables([]) == ({}, {})


def test_the_lessons_effect_measures_both_where_there_are_two_nodes(fake_numactl):
    got = effect.measure(_two_nodes(), 8 * 2**20)
    assert got.memory.skipped is None and "memory, local vs remote: measured (table below)" in got.text()
    t = got.tables()[0]  # the copies need a GPU: only the memory table here (or both on a GPU box)
    assert list(t.columns) == ["cores on node", "memory on node", "copy (GB/s, read + write)", "ns per random read", "error"]
    ratio, against, hardware = got.latency_ratio(None)  # measured here: the published figure is not read
    assert ratio is not None and ratio > 0 and against is None and hardware is None


def test_one_node_says_why_and_reveals_against_the_published_matrix():
    from perflab.numa.topology import Node, Topology

    one = Topology([Node(0, [0, 1], 2**30)], [[10]], [], [0, 1])
    got = effect.measure(one, 2**20)
    assert got.tables() == [] and got.text().count("no remote memory to compare") == 2

    class Published:
        values = [{"cpu_node": 0, "memory_node": 0, "value": 89.2}, {"cpu_node": 0, "memory_node": 1, "value": 142.7}]
        hardware = "2x Xeon 8360Y"

    ratio, against, hardware = got.latency_ratio(Published())
    assert ratio == pytest.approx(142.7 / 89.2) and against == "published (Intel MLC)" and hardware == "2x Xeon 8360Y"
    bw = [{"cpu_node": 0, "memory_node": 0, "value": 175.7}, {"cpu_node": 0, "memory_node": 1, "value": 55.7}]
    assert effect.published_ratios_text(Published.values, bw) == "published, remote / local: latency 1.60×, read bandwidth 0.32×"
