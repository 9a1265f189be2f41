"""Tests of `perflab.numa.panel`."""

from __future__ import annotations

import pytest

from perflab.core.errors import PerflabError
from perflab.numa import panel
from perflab.numa.topology import Node, Topology


def _topo(mem):
    return Topology(nodes=[Node(0, [0, 1], mem)], distances=[[10]], gpus=[], siblings={}, affinity=[0, 1])


def test_the_panel_offers_this_machine_and_the_published_server():
    topos = panel.topologies()
    assert set(topos) == {panel.HERE, panel.SERVER}
    assert len(topos[panel.SERVER].gpus) == 8 and len(topos[panel.SERVER].nodes) == 2


def test_meminfo_without_memtotal_is_unknown(tmp_path):
    (tmp_path / "meminfo").write_text("MemFree:  1024 kB\n")
    assert panel.proc_memtotal_bytes(tmp_path / "meminfo") is None
    (tmp_path / "meminfo").write_text("MemTotal:  2048 kB\n")
    assert panel.proc_memtotal_bytes(tmp_path / "meminfo") == 2048 * 1024


def test_plan_view_redraws_for_the_server_and_refuses_too_many_ranks():
    topos = {panel.SERVER: panel.published_server()}
    table, fig = panel.plan_view(topos, panel.SERVER, 8)
    assert list(table["count"]) == [26] * 8 and fig is not None
    table4, _ = panel.plan_view(topos, panel.SERVER, 4)  # GPUs 0-3 all sit on node 0: it is split four ways
    assert list(table4["count"]) == [26] * 4 and set(table4["node"]) == {0}
    with pytest.raises(PerflabError):
        panel.plan_view(topos, panel.SERVER, 500)


def test_memory_note_compares_sysfs_with_proc(tmp_path):
    proc = tmp_path / "meminfo"
    proc.write_text("MemTotal:       24684092 kB\nMemFree: 1 kB\n")
    assert "They differ" in panel.memory_note(_topo(10 * 2**30), proc)
    assert "they agree" in panel.memory_note(_topo(24684092 * 1024), proc)
    assert "could not be read" in panel.memory_note(_topo(10 * 2**30), tmp_path / "missing")


def test_the_published_server_reads_as_a_table_with_its_source():
    server = panel.published()
    assert "8×H100" in server.text() and "source: Stas Bekman" in server.text()
    t = server.table()
    assert list(t.index) == list(range(8)) and t.loc[0, "CPU affinity"] == "0-51,104-155"
    assert t.loc[4, "NUMA node"] == 1 and t.loc[1, "link to GPU0"] == "NV18" and t.loc[0, "link to GPU0"] == "X"
    assert len(server.topology.gpus) == 8
