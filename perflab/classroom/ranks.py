"""A learner's function run on several ranks that can only talk through the judge: what each rank
sent and what each returned are measured here, outside every process the learner's code runs in.

    run = run_ranks(code, "ring_all_reduce", inputs, confine=confinement, timeout=120)
    run.ranks[r].outputs[i], run.ranks[r].bytes_sent[i], run.message

Each rank (rank_worker.py) runs in a sandbox of its own, perflab out of view, in the learner's
cgroup, under the learner's limits, every new process refused: it has no network namespace, file
or process in common with another rank, so its only channel is its pipe to this process. Here one
thread per rank reads its frames: a send is counted against its sender (bytes, per call of the
function) and queued for its receiver; a receive is answered with the oldest message from the rank
it names (any rank, where it names none); a barrier is answered when every rank running has
reached it; a collective is noted and refused. Each call's returned tensor comes back as bytes
and is decoded here (dtype and size checked against the input's). A rank that waits for a message
that can never come (every other rank waiting or finished, nothing queued for it) ends the run at
once ("deadlocked"), and the run ends at its timeout whatever the ranks do. The judge signals only
the processes it started here (the ranks' sandboxes; their cgroup kills what is left).
"""

from __future__ import annotations

import contextlib
import json
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflab.classroom.boxes import Tail

if TYPE_CHECKING:
    import torch

    from perflab.classroom.worker import Confinement

RANK_WORKER = Path(__file__).with_name("rank_worker.py")
SECCOMP = Path(__file__).with_name("seccomp.py")
MAX_HEADER = 2**16  # a frame's JSON header
MAX_ITEMS = 2**24  # elements of one tensor a rank sends or returns


@dataclass
class RankReport:
    """One rank's run: per call of the function, the tensor it returned (None: it returned
    something else, named in `returned`), the bytes and messages it sent; the collectives it asked
    for; how it failed (`error`), or that it is a stub (`not_done`)."""

    rank: int
    outputs: list[Any] = field(default_factory=list)
    returned: list[str] = field(default_factory=list)
    bytes_sent: list[int] = field(default_factory=list)
    sends: list[int] = field(default_factory=list)
    collectives: list[str] = field(default_factory=list)
    error: str | None = None
    not_done: bool = False
    finished: bool = False
    output: str = ""  # the last lines it printed


@dataclass
class RankRun:
    """Every rank's report, and why the run as a whole stopped ('' when every rank finished)."""

    ranks: list[RankReport]
    message: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.message and all(r.finished and r.error is None and not r.not_done for r in self.ranks)


class _Broker:
    def __init__(self, n: int, rounds: int, max_bytes: int):
        self.n, self.rounds, self.max_bytes = n, rounds, max_bytes
        self.cond = threading.Condition()
        self.queues: dict[tuple[int, int], deque] = {}
        self.reports = [RankReport(r, bytes_sent=[0] * rounds, sends=[0] * rounds) for r in range(n)]
        self.round = [0] * n
        self.waiting: dict[int, int | None] = {}  # rank -> the rank it waits for (None: any)
        self.barrier: dict[int, int] = {}  # rank -> the barrier it waits at
        self.passed = [0] * n
        self.done = [False] * n
        self.abort = ""

    def deliverable(self, rank: int) -> bool:
        src = self.waiting[rank]
        return any(self.queues.get((s, rank)) for s in (range(self.n) if src is None else [src]))

    def stuck(self) -> bool:
        """Every rank still running waits (to receive or at a barrier) and none can go on."""
        running = [r for r in range(self.n) if not self.done[r]]
        if not running or any(r not in self.waiting and r not in self.barrier for r in running):
            return False
        if any(r in self.waiting and self.deliverable(r) for r in running):
            return False
        if self.barrier and all(r in self.barrier for r in running):
            return False
        return True


def _read(stream: Any, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _write(stream: Any, header: dict, payload: bytes = b"") -> None:
    data = json.dumps(header).encode()
    stream.write(struct.pack(">II", len(data), len(payload)) + data + payload)
    stream.flush()


def _decode(header: dict, payload: bytes) -> Any:
    """A tensor from its frame: a known dtype, a shape that matches its bytes, bounded in size."""
    import torch

    dtype = getattr(torch, str(header.get("dtype")), None)
    shape = header.get("shape")
    if not isinstance(dtype, torch.dtype) or not isinstance(shape, list) or len(shape) > 32 \
            or not all(isinstance(s, int) and s >= 0 for s in shape):
        raise ValueError("a tensor the grader cannot read")
    numel = 1
    for s in shape:
        numel *= s
    item = torch.empty((), dtype=dtype).element_size()
    if numel > MAX_ITEMS or numel * item != len(payload):
        raise ValueError("a tensor whose shape and bytes disagree")
    if not payload:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(payload), dtype=torch.uint8).view(dtype).reshape(shape).clone()


def _serve(b: _Broker, rank: int, proc: subprocess.Popen) -> None:
    """Read rank `rank`'s frames until it ends; answer its receives and barriers."""
    rep = b.reports[rank]
    out, inp = proc.stdout, proc.stdin
    try:
        while True:
            jn, pn = struct.unpack(">II", _read(out, 8))
            if jn > MAX_HEADER or pn > b.max_bytes:
                raise ValueError("a frame larger than the grader reads")
            header = json.loads(_read(out, jn))
            payload = _read(out, pn) if pn else b""
            op = header.get("op") if isinstance(header, dict) else None
            reply: tuple[dict, bytes] | None = None
            with b.cond:
                if b.abort:
                    return
                k = min(b.round[rank], b.rounds - 1)
                if op == "send":
                    dst = header.get("dst")
                    if not isinstance(dst, int) or not 0 <= dst < b.n or dst == rank:
                        raise ValueError(f"a send to rank {dst!r}")
                    rep.bytes_sent[k] += len(payload)
                    rep.sends[k] += 1
                    if sum(rep.bytes_sent) > b.max_bytes:
                        rep.error = f"sent more than {b.max_bytes // 2**20} MiB, far more than the job needs"
                        b.abort = f"rank {rank} sent more than {b.max_bytes // 2**20} MiB"
                        b.cond.notify_all()
                        return
                    b.queues.setdefault((rank, dst), deque()).append((header, payload))
                    b.cond.notify_all()
                elif op == "recv":
                    src = header.get("src")
                    b.waiting[rank] = src if isinstance(src, int) and 0 <= src < b.n else None
                    b.cond.notify_all()
                    while not b.abort and not b.deliverable(rank):
                        if b.stuck():
                            b.abort = "every rank waits to receive and none can send: the ranks are deadlocked"
                            b.cond.notify_all()
                            break
                        b.cond.wait(0.5)
                    want = b.waiting.pop(rank, None)
                    if b.abort:
                        return
                    src_rank = next(s for s in (range(b.n) if want is None else [want]) if b.queues.get((s, rank)))
                    sent, data = b.queues[(src_rank, rank)].popleft()
                    reply = ({"op": "data", "src": src_rank, "dtype": sent.get("dtype")}, data)
                    b.cond.notify_all()
                elif op == "barrier":
                    mine = b.passed[rank]
                    b.barrier[rank] = mine
                    b.cond.notify_all()
                    while not b.abort and not all(b.done[r] or b.passed[r] > mine or b.barrier.get(r) == mine
                                                  for r in range(b.n)):
                        if b.stuck():
                            b.abort = "the ranks wait for each other at a barrier that not all of them reach"
                            b.cond.notify_all()
                            break
                        b.cond.wait(0.5)
                    b.barrier.pop(rank, None)
                    b.passed[rank] += 1
                    if b.abort:
                        return
                    reply = ({"op": "barrier"}, b"")
                    b.cond.notify_all()
                elif op == "collective":
                    rep.collectives.append(str(header.get("name"))[:40])
                elif op == "result":
                    if "dtype" in header:
                        rep.outputs.append(_decode(header, payload))
                        rep.returned.append("Tensor")
                    else:
                        rep.outputs.append(None)
                        rep.returned.append(str(header.get("returned", "nothing"))[:40])
                    b.round[rank] += 1
                    if b.round[rank] >= b.rounds:
                        rep.finished = True
                        b.done[rank] = True
                        b.cond.notify_all()
                        return
                elif op == "not_done":
                    rep.not_done, rep.finished, b.done[rank] = True, True, True
                    b.cond.notify_all()
                    return
                elif op == "error":
                    rep.error, rep.finished, b.done[rank] = str(header.get("message", ""))[:400], True, True
                    b.cond.notify_all()
                    return
                else:
                    raise ValueError("a frame the grader does not know")
            if reply is not None:
                _write(inp, *reply)
    except (EOFError, OSError, ValueError, struct.error) as e:
        with b.cond:
            if not b.done[rank]:
                rep.error = rep.error or ("ended before it returned" if isinstance(e, EOFError)
                                          else f"wrote what is not a message of the job ({e})")
                rep.finished = b.done[rank] = True
            b.cond.notify_all()


def run_ranks(code: str, name: str, inputs: Sequence[Sequence[torch.Tensor]], *, confine: Confinement,
              timeout: float = 120.0, max_bytes: int = 256 * 2**20) -> RankRun:
    """Run `name` from `code` on `len(inputs)` ranks, rank r calling it once on each tensor of
    `inputs[r]` (see the module's docstring)."""
    from perflab.classroom.sandbox import python_path

    n, rounds = len(inputs), len(inputs[0]) if inputs else 0
    b = _Broker(n, rounds, max_bytes)
    procs: list[subprocess.Popen] = []
    logs: list[Tail] = []
    threads: list[threading.Thread] = []
    site = python_path()[1:]  # site-packages only: torch, never perflab
    t0 = time.monotonic()
    try:
        for r in range(n):
            cmd = [sys.executable, "-I", "-S", "-B", "-c", _BOOT, ":".join(site), str(RANK_WORKER)]
            cmd = confine.wrap(cmd, readable=[RANK_WORKER, SECCOMP], perflab=False, cwd="/tmp" if confine.sandbox
                               else None)
            log = Tail(16 * 2**10)
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "HOME": "/tmp",
                   "TMPDIR": "/tmp", "PYTHONHASHSEED": "0"}
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.fd, env=env,
                                    start_new_session=True)
            log.close_writer()
            procs.append(proc)
            logs.append(log)
            payload = b"".join(_bytes(x) for x in inputs[r])
            rounds_spec = [{"dtype": str(x.dtype).replace("torch.", ""), "shape": list(x.shape),
                            "nbytes": len(_bytes(x))} for x in inputs[r]]
            start = {"op": "start", "rank": r, "world_size": n, "code": code, "name": name, "rounds": rounds_spec,
                     "limits": confine.limits(), "seccomp": str(SECCOMP)}
            try:
                _write(proc.stdin, start, payload)
            except OSError:
                pass
            t = threading.Thread(target=_serve, args=(b, r, proc), daemon=True)
            t.start()
            threads.append(t)
        deadline = t0 + timeout
        with b.cond:
            while not b.abort and not all(b.done):
                if time.monotonic() > deadline:
                    b.abort = f"did not finish within {timeout:g} s"
                    break
                b.cond.wait(0.2)
            b.cond.notify_all()
    finally:
        for p in procs:  # only the processes started here: the ranks' sandboxes
            with contextlib.suppress(OSError):
                p.kill()
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
            for s in (p.stdin, p.stdout):
                with contextlib.suppress(OSError):
                    if s is not None:
                        s.close()
        for t in threads:
            t.join(2)
    for rep, log in zip(b.reports, logs):
        rep.output = "\n".join(log.text(0.5).splitlines()[-12:])
    return RankRun(b.reports, b.abort, time.monotonic() - t0)


_BOOT = ("import os, sys, runpy; sys.argv.pop(0); sys.path[:0] = [p for p in sys.argv.pop(0).split(':') if p]; "
         "runpy.run_path(sys.argv[0], run_name='__main__')")


def _bytes(x: Any) -> bytes:
    import torch

    flat = x.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
