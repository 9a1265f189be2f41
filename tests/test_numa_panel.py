"""Lesson 08's panel: a plan and a rank map for either topology; the memory note says whether the counters agree."""

import pytest

from perflab.core.errors import PerflabError
from perflab.numa import panel
from perflab.numa.topology import Node, Topology


def _topo(mem):
    return Topology(nodes=[Node(0, [0, 1], mem)], distances=[[10]], gpus=[], siblings={}, affinity=[0, 1])


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
