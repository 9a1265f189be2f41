"""Tests of `perflab.classroom.rank_worker`: one rank, driven frame by frame as the judge drives it."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

from perflab.classroom import rank_worker, seccomp
from perflab.classroom.sandbox import python_path


def _frames(data: bytes) -> list[dict]:
    out = []
    while len(data) >= 8:
        jn, pn = struct.unpack(">II", data[:8])
        out.append(json.loads(data[8:8 + jn]))
        data = data[8 + jn + pn:]
    return out


def one_rank(code: str, name: str = "f") -> list[dict]:
    """A world of two, this rank 0 alone: what it sends the judge for one call on four floats."""
    start = {"op": "start", "rank": 0, "world_size": 2, "code": code, "name": name, "limits": {},
             "seccomp": str(seccomp.__file__), "rounds": [{"dtype": "float32", "shape": [4], "nbytes": 16}]}
    head = json.dumps(start).encode()
    frame = struct.pack(">II", len(head), 16) + head + struct.pack("<4f", 1, 2, 3, 4)
    boot = "import sys, runpy; sys.path[:0] = sys.argv.pop(1).split(':'); runpy.run_path(sys.argv[1], run_name='__main__')"
    site = ":".join(python_path()[1:])  # site-packages only (torch): perflab is not on this rank's path
    out = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", boot, site, str(rank_worker.__file__)], input=frame,
                         capture_output=True, timeout=120, env={"PATH": "/usr/bin:/bin"}, cwd="/", check=False)
    return _frames(out.stdout)


def test_a_rank_answers_in_frames_and_what_its_code_prints_stays_out_of_them():
    got = one_rank("def f(x, rank, world):\n    print('hello')\n    dist.isend(x * 2, 1)\n    return x + rank\n")
    assert [g["op"] for g in got] == ["send", "result"] and got[0]["dst"] == 1 and got[1]["shape"] == [4]


def test_perflab_is_not_in_a_ranks_reach_and_a_stub_is_not_done():
    got = one_rank("from perflab.distributed import ring\n\ndef f(x, rank, world):\n    return ring.ring_all_reduce(x)\n")
    assert got[-1]["op"] == "error" and "not in view on the grader's ranks" in got[-1]["message"], got
    assert one_rank("def f(x, rank, world):\n    raise NotImplementedError\n")[-1]["op"] == "not_done"
