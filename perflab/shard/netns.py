"""Two nodes on one machine: each its own Linux network namespace, joined by a veth pair.

    >>> res = two_node_launch(nproc_per_node=2)        # root only (ip netns)
    >>> res.ranks                                      # what each rank reported: RANK, LOCAL_RANK, GROUP_RANK, ...
    >>> [r["all_reduce"] for r in res.ranks]           # each rank's sum of every rank's number

The namespaces `perflab-<pid>-0` and `-1` each get one end of a veth pair, addressed 10.201.0.1/24
and 10.201.0.2/24, and nothing else: a namespace starts with no routes, so the ranks can reach
each other and nothing beyond. In each, `torchrun --nnodes 2 --rdzv-backend c10d` starts the ranks
of its node; node 0's agent hosts the rendezvous store on 10.201.0.1. Every process is started in
a session of its own and stopped on return (SIGTERM, then SIGKILL), then any process left inside
the namespaces is killed by pid and both namespaces are deleted (the veth pair goes with them).

On a real cluster the same job is one line per node (`perflab.distributed.torchrun.cluster_command`) or
one `srun` line in an sbatch script (`perflab.distributed.torchrun.slurm_script`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.core.errors import PerflabError
from perflab.core.jsonable import JSON

ADDRESSES = ("10.201.0.1", "10.201.0.2")
PORT = 29500  # a fresh namespace has no other listener: any port is free there
RESULT_PREFIX = "PERFLAB_RESULT "


def unavailable() -> str | None:
    """Why this machine cannot make namespaces (None when it can)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are a Linux feature"
    if os.geteuid() != 0:
        return "creating network namespaces (ip netns add) needs root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    return None


def _ip(*args: str) -> None:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if out.returncode != 0:
        raise PerflabError(f"ip {' '.join(args)} failed: {out.stderr.strip()}")


def _names(tag: str) -> tuple[list[str], list[str]]:
    return [f"perflab-{tag}-{i}" for i in range(2)], [f"plv{tag[-6:]}{i}"[:15] for i in range(2)]


def create(tag: str) -> tuple[list[str], list[str]]:
    """Make the two namespaces and the veth pair between them; returns (namespaces, interfaces)."""
    ns, veth = _names(tag)
    for n in ns:
        _ip("netns", "add", n)
    _ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
    for n, v, a in zip(ns, veth, ADDRESSES, strict=True):
        _ip("link", "set", v, "netns", n)
        _ip("-n", n, "addr", "add", f"{a}/24", "dev", v)
        _ip("-n", n, "link", "set", v, "up")
        _ip("-n", n, "link", "set", "lo", "up")
    return ns, veth


def delete(namespaces: list[str]) -> None:
    """Kill whatever still runs inside each namespace (by pid), then delete it."""
    for n in namespaces:
        out = subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True, timeout=10)
        for pid in out.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=10)


def node_command(ns: str, node: int, nproc_per_node: int, rdzv_id: str, agent: str | None = None) -> list[str]:
    """The torchrun line node `node` runs inside its namespace. `agent`: torchrun itself
    (torch.distributed.run), or perflab.distributed.agent (torchrun's parser and agent, ranks forked from it,
    the default on Linux: see `perflab.distributed.torchrun.launch_agent`)."""
    from perflab.distributed.torchrun import launch_agent

    return ["ip", "netns", "exec", ns, sys.executable, "-m", agent or launch_agent(),
            "--nnodes", "2", "--nproc-per-node", str(nproc_per_node), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{ADDRESSES[0]}:{PORT}", "--rdzv-id", rdzv_id,
            # node 0 hosts the store: torch recognises its own address by hostname lookup, which
            # knows nothing of a namespace's veth address
            "--rdzv-conf", f"is_host={'true' if node == 0 else 'false'}",
            "--local-addr", ADDRESSES[node], "--max-restarts", "0", "--monitor-interval", "0.1",
            "-m", "perflab.shard.netns"]


@dataclass
class TwoNodeRun:
    """What `two_node_launch` did: whether every rank reported in time, each node's exit code, the
    seconds it took, what each rank reported (`body`'s record, plus `namespace_node`: the namespace
    whose log it was read from; sorted by RANK), each node's output, and the commands it ran."""

    ok: bool
    timed_out: bool
    returncodes: list[int | None]
    seconds: float
    ranks: list[dict[str, Any]]
    outputs: list[str]
    namespaces: list[str]
    addresses: list[str]
    commands: list[str]

    def table(self):
        """One row per rank: the numbers torchrun gave it, the all-reduce it computed and the address it met at."""
        import pandas as pd

        cols = ["RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE", "all_reduce", "master_addr"]
        return pd.DataFrame([{c: r.get(c) for c in cols} for r in self.ranks], columns=cols)


def two_node_launch(nproc_per_node: int = 2, timeout: float = 50.0) -> TwoNodeRun:
    """Run `perflab.shard.netns` (an all-reduce that reports the rank layout) on 2 namespaced nodes."""
    why = unavailable()
    if why:
        raise PerflabError(f"cannot run the two-node launch here: {why}")
    tag = str(os.getpid())
    ns: list[str] = []
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="perflab-netns-"))
    t0 = time.monotonic()
    timed_out = False
    try:
        ns, veth = create(tag)
        root = str(Path(__file__).resolve().parents[2])
        for i in range(2):
            env = dict(os.environ, GLOO_SOCKET_IFNAME=veth[i], OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
                       PYTHONPATH=os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
            env.pop("PERFLAB_RUN_DIR", None)
            log = folder / f"node{i}.log"
            logs.append(log)
            with open(log, "wb") as f:
                procs.append(subprocess.Popen(node_command(ns[i], i, nproc_per_node, f"perflab-{tag}"), stdout=f,
                                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                              start_new_session=True))
        deadline = t0 + timeout
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.1)
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in procs:
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=5)
        if ns:
            delete(ns)
    outputs = [log.read_text(errors="replace") if log.exists() else "" for log in logs]
    shutil.rmtree(folder, ignore_errors=True)
    ranks = []
    decoder = json.JSONDecoder()
    for node, text in enumerate(outputs):
        # the node's ranks share one log: a record may share its line with another rank's output, so
        # each is read as one JSON value from its prefix on; a record cut by another's is not counted
        k = text.find(RESULT_PREFIX)
        while k >= 0:
            try:
                rec = decoder.raw_decode(text, k + len(RESULT_PREFIX))[0]["result"]
            except (ValueError, KeyError, TypeError):
                rec = None
            if isinstance(rec, dict):
                rec["namespace_node"] = node
                ranks.append(rec)
            k = text.find(RESULT_PREFIX, k + len(RESULT_PREFIX))
    ranks.sort(key=lambda r: r["RANK"])
    return TwoNodeRun(not timed_out and all(p.returncode == 0 for p in procs) and len(ranks) == 2 * nproc_per_node,
                      timed_out, [p.returncode for p in procs], time.monotonic() - t0, ranks, outputs, ns,
                      list(ADDRESSES),
                      [" ".join(node_command(n, i, nproc_per_node, f"perflab-{tag}")) for i, n in enumerate(ns)])


def namespaces_left(tag: str | None = None) -> list[str]:
    """perflab's namespaces that still exist (for tests: none after a launch)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    names = [line.split()[0] for line in out.stdout.splitlines() if line.strip()]
    return [n for n in names if n.startswith(f"perflab-{tag}-" if tag else "perflab-")]


# ----------------------------------------------------------------------------- inside each rank
def body(ctx) -> JSON:
    """This rank's record (printed as its `PERFLAB_RESULT` line): torchrun's rank layout, the all-reduce
    of every rank's number, MASTER_ADDR, its host and pid."""
    import socket

    import torch
    import torch.distributed as dist

    x = torch.tensor([float(ctx.rank)])
    dist.all_reduce(x)
    env = {k: int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")}
    return {**env, "all_reduce": float(x[0]), "master_addr": os.environ.get("MASTER_ADDR"),
            "host": socket.gethostname(), "pid": os.getpid()}


if __name__ == "__main__":
    from perflab.distributed.workers import runtime

    runtime.run(body, backend="gloo")
