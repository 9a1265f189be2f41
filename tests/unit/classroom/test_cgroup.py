"""Tests of `perflab.classroom.cgroup`: one learner's processes counted and capped together."""

from __future__ import annotations

import subprocess
import sys

import pytest

from perflab.classroom import cgroup
from perflab.classroom.cgroup import Cgroups, Group

FORKS = """
import os, time
kids = []
for _ in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    kids.append(pid)
print(len(kids))
for pid in kids:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
"""
CHILDREN = """
import os, time
pipes, kids = [], []
for _ in range(4):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        b = bytearray(60 * 2**20)
        os.write(w, b"1")
        time.sleep(20)
        os._exit(0)
    os.close(w)
    pipes.append(r)
    kids.append(pid)
asked = [os.read(r, 1) == b"1" for r in pipes]
# the kernel's OOM kills end a child that had its 60 MiB (not always the one asking): count those
# still holding theirs, polled until they fit or a deadline passes (a group that caps nothing keeps all 4)
alive, deadline = set(kids), time.monotonic() + 10
while len(alive) * 60 * 2**20 >= 160 * 2**20 and time.monotonic() < deadline:
    alive = {pid for pid in alive if os.waitpid(pid, os.WNOHANG) == (0, 0)}
    time.sleep(0.01)
print(sum(asked), len(alive))
for pid in alive:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
"""


def test_a_command_joins_its_group_before_it_runs():
    g = Group("v1", {"memory": cgroup.Path("/cg/memory/l0"), "pids": cgroup.Path("/cg/pids/l0")})
    cmd = g.wrap(["python", "x.py"])
    assert cmd[:3] == ["/bin/sh", "-c", cgroup.JOIN] and cmd[4:7] == ["2", "/cg/memory/l0/cgroup.procs",
                                                                     "/cg/pids/l0/cgroup.procs"]
    assert cmd[-2:] == ["python", "x.py"]
    out = subprocess.run(["/bin/sh", "-c", cgroup.JOIN, "join", "1", "/nonexistent/cgroup.procs", "true"])
    assert out.returncode == cgroup.EXIT_JOIN  # a group it cannot join: the command never runs


def test_where_no_group_can_be_made_the_reason_is_said():
    groups = Cgroups.make()
    if groups is not None:
        groups.close()
        assert cgroup.why() == ""
    else:
        assert cgroup.why()


@pytest.mark.skipif(Cgroups.make() is None, reason=f"no cgroup can be made here: {cgroup.why()}")
def test_a_group_caps_its_processes_and_their_memory_together():
    groups = Cgroups.make()
    assert groups is not None
    group = groups.learner(0, memory_bytes=160 * 2**20, processes=40, cpus=1)
    try:
        assert group is not None
        forked = int(subprocess.run(group.wrap([sys.executable, "-c", FORKS]), capture_output=True, text=True,
                                    timeout=60).stdout)
        assert forked < 40  # a root user is capped as any other
        group.kill()  # its killed children, gone before the next run
        held = subprocess.run(group.wrap([sys.executable, "-c", CHILDREN]), capture_output=True, text=True, timeout=60)
        if held.returncode == 0:  # 240 MiB asked in all: never more than the limit held together
            assert int(held.stdout.split()[1]) * 60 * 2**20 < 160 * 2**20, held
        assert group.hit_memory_limit()
        group.kill()
        assert group.pids() == []
    finally:
        if group is not None:
            group.close()
        groups.close()
    assert not any(p.exists() for p in groups.parents.values())
