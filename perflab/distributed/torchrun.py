"""Run a worker under `torchrun` from a notebook or the CLI, and get every rank's story back.

    >>> res = launch("perflab.distributed.workers.collectives", nproc=4, timeout=60)
    >>> res.ok, res.seconds, res.backend
    >>> res.results                 # what each rank reported (a list indexed by rank)
    >>> print(res.report())         # who failed and how, with each failed rank's output
    >>> res.raise_for_status()      # DistRunError with a one-line message unless every rank finished

What `launch` guarantees:
* **No fixed port, nothing on the network.** The rendezvous goes through a `FileStore` in a fresh
  temporary folder (`--rdzv-backend c10d --rdzv-conf store_type=file`), workers started by
  `perflab.distributed.workers.runtime` join the process group through a FileStore too, and gloo/NCCL sockets
  are pinned to the loopback interface. Two launches side by side never collide.
* **A timeout, and nothing left running.** torchrun starts in its own session; its workers (which
  torchrun puts in sessions of their own) are tracked by pid. On timeout, Ctrl-C, or a failure,
  every one of them is stopped: SIGTERM, then SIGKILL a second later.
* **A clear report.** Each rank's stdout/stderr is captured in its own file (torchrun's
  `--log-dir/--redirects`), and the result says, in one line, e.g. "rank 2 raised ValueError: ..."
  or "rank 1 did not finish within 30 s (last step 'compute', at faulty.py:41 in body)", with that
  rank's output in `report()`. A rank that hangs has its Python stack dumped (SIGUSR1 →
  faulthandler) just before the deadline, so the report shows where it was.

Multi-node: `launch(..., nnodes=2)` starts two torchrun agents on this machine that meet through
the same rendezvous, which is how two real nodes meet (see `cluster_command` and `slurm_script`
for the commands to type on a real cluster).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from perflab.core.errors import InputError, PerflabError
from perflab.core.validate import positive_int
from perflab.distributed.workers.runtime import ENV_BACKEND, ENV_RUN_DIR

MAX_NPROC = 64
MAX_NNODES = 8
TAIL_CHARS = 20_000
PYNVML_WARNING = "ignore:The pynvml package is deprecated:FutureWarning"


class _Process(Protocol):
    """What `launch` needs of an agent: a subprocess.Popen or a perflab.distributed.agent.ForkedAgent."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | Any: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int | Any: ...


class DistRunError(PerflabError):
    """A torchrun job did not finish on every rank; the message says which rank and why."""

    def __init__(self, message: str, result: LaunchResult | None = None):
        super().__init__(message)
        self.result = result


# ----------------------------------------------------------------------------- backend choice
@dataclass(frozen=True)
class BackendChoice:
    """Which torch.distributed backend a job uses, on which device, and why."""

    name: str  # 'gloo' or 'nccl'
    device: str  # 'cpu' or 'cuda'
    reason: str


def choose_backend(nproc: int, backend: str | None = None) -> BackendChoice:
    """NCCL when there is a GPU for every rank on this machine, else gloo on the CPU.

    NCCL needs one GPU per rank: two ranks on one GPU fail ("Duplicate GPU detected"), so with
    fewer GPUs than ranks the job runs on gloo with CPU tensors and `reason` says so.
    """
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend is not None:
        name = str(backend).strip().lower()
        if name not in ("gloo", "nccl"):
            raise InputError(f"unknown backend {backend!r}: use gloo (CPU tensors) or nccl (one GPU per rank)")
        if name == "nccl":
            if gpus == 0:
                raise InputError("backend nccl needs CUDA GPUs and torch sees none here: use --backend gloo")
            if gpus < nproc:
                raise InputError(f"backend nccl needs one GPU per rank: {nproc} ranks but {gpus} GPU(s) here; "
                                 f"use --nproc {gpus} or --backend gloo")
            return BackendChoice("nccl", "cuda", f"asked for nccl: {nproc} ranks on {gpus} GPU(s)")
        return BackendChoice("gloo", "cpu", "asked for gloo: CPU tensors")
    if gpus >= nproc:
        return BackendChoice("nccl", "cuda", f"{gpus} GPU(s) for {nproc} ranks: NCCL, one GPU per rank")
    if gpus:
        return BackendChoice("gloo", "cpu", f"{nproc} ranks but only {gpus} GPU(s): NCCL needs one GPU per rank, "
                                            "so gloo runs on CPU tensors")
    return BackendChoice("gloo", "cpu", "no GPU here: gloo on CPU tensors")


# ----------------------------------------------------------------------------- commands
def _loopback_interface() -> str:
    return "lo0" if sys.platform == "darwin" else "lo"


def torchrun_command(target: str, nproc: int, args: list[str] | tuple[str, ...] = (), *, nnodes: int = 1,
                     rdzv_endpoint: str, rdzv_id: str = "perflab", log_dir: str | Path | None = None,
                     python: str | None = None, agent: str = "torch.distributed.run") -> list[str]:
    """The torchrun command `launch` runs on this machine (one per simulated node).

    `target` is a module (perflab.distributed.workers.collectives) or a path to a .py script. `agent`:
    torchrun itself, or `perflab.distributed.agent` (the same arguments and agent, ranks forked: see
    `launch_agent`).
    """
    module = not str(target).endswith(".py")
    cmd = [python or sys.executable, "-m", agent,
           "--nnodes", str(nnodes), "--nproc-per-node", str(nproc),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", str(rdzv_endpoint), "--rdzv-conf", "store_type=file",
           "--rdzv-id", rdzv_id, "--local-addr", "127.0.0.1",
           "--max-restarts", "0", "--monitor-interval", "0.1"]
    if log_dir is not None:
        cmd += ["--log-dir", str(log_dir), "--redirects", "3"]
    cmd += (["-m", str(target)] if module else [str(target)]) + [str(a) for a in args]
    return cmd


def cluster_command(target: str, nproc_per_node: int, nnodes: int, args: list[str] | tuple[str, ...] = (), *,
                    endpoint: str = "$MASTER_ADDR:29500", rdzv_id: str = "$JOB_ID") -> str:
    """What to type on *each* node of a real cluster (same line everywhere; torchrun assigns ranks).

    The c10d rendezvous is a TCP store on `endpoint` (the first node's address and an open port of
    your choosing on the cluster's private network); `rdzv_id` keeps two jobs apart.
    """
    module = not str(target).endswith(".py")
    parts = ["torchrun", f"--nnodes={nnodes}", f"--nproc-per-node={nproc_per_node}",
             "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={rdzv_id}", "--max-restarts=0"]
    parts += (["-m", str(target)] if module else [str(target)]) + [str(a) for a in args]
    return " ".join(parts)


def slurm_script(target: str, *, nodes: int, gpus_per_node: int, args: list[str] | tuple[str, ...] = (),
                 job_name: str = "perflab", time_limit: str = "00:30:00", partition: str | None = None) -> str:
    """An sbatch script that starts one torchrun per node with `srun`; torchrun starts the ranks."""
    nodes = positive_int("nodes", nodes, maximum=4096)
    gpus_per_node = positive_int("gpus_per_node", gpus_per_node, maximum=64)
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job_name}", f"#SBATCH --nodes={nodes}",
             "#SBATCH --ntasks-per-node=1          # one torchrun agent per node; it starts the ranks",
             f"#SBATCH --gpus-per-node={gpus_per_node}", f"#SBATCH --time={time_limit}"]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    lines += [
        "",
        "# the first node of the allocation hosts the rendezvous store",
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "export MASTER_PORT=29500              # any port that is free on the cluster's private network",
        "",
        "srun --kill-on-bad-exit=1 " + cluster_command(target, gpus_per_node, nodes, args,
                                                      endpoint="$MASTER_ADDR:$MASTER_PORT",
                                                      rdzv_id="$SLURM_JOB_ID"),
    ]
    return "\n".join(lines) + "\n"


def worker_env(run_dir: Path, backend: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment every rank gets: loopback-only sockets, unbuffered output, one thread each."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default for >1 rank, set here so it does not warn
    env["PYTHONUNBUFFERED"] = "1"  # a rank killed on timeout still leaves its output behind
    env[ENV_RUN_DIR] = str(run_dir)
    env[ENV_BACKEND] = backend
    env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"  # no TCP store in the agent: the rendezvous is a file
    env["GLOO_SOCKET_IFNAME"] = _loopback_interface()
    env["NCCL_SOCKET_IFNAME"] = _loopback_interface()
    env["MASTER_ADDR"] = "127.0.0.1"
    warnings = [w for w in env.get("PYTHONWARNINGS", "").split(",") if w]
    if PYNVML_WARNING not in warnings:
        warnings.append(PYNVML_WARNING)
    env["PYTHONWARNINGS"] = ",".join(warnings)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(extra or {})
    return env


# ----------------------------------------------------------------------------- results
@dataclass
class RankOutcome:
    """How one rank ended."""

    rank: int
    status: str  # ok | raised | timeout | stopped | failed | unknown
    exit_code: int | None = None
    error: str | None = None  # "ValueError: boom"
    step: str | None = None  # the last step it announced (runtime.RankContext.step)
    where: str | None = None  # from its stack dump when it hung: "faulty.py:41 in body"
    waiting_in: str | None = None  # the torch.distributed call it was blocked in when it hung, if any
    started: bool = False  # its worker code ran (it said where it was, or printed something)
    stdout: str = ""
    stderr: str = ""
    pid: int | None = None
    local_rank: int | None = None
    node: int | None = None
    result: Any = None
    error_time: float | None = None

    @property
    def output(self) -> str:
        return (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).strip()

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.output.splitlines()[-lines:])

    def as_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "status": self.status, "exit_code": self.exit_code, "error": self.error,
                "step": self.step, "where": self.where, "pid": self.pid, "local_rank": self.local_rank,
                "node": self.node, "output_tail": self.tail()}


@dataclass
class LaunchResult:
    """What a torchrun job did: every rank's outcome, the command, the time it took."""

    target: str
    nproc: int
    nnodes: int
    backend: BackendChoice
    commands: list[list[str]]
    seconds: float
    timeout_s: float
    timed_out: bool
    returncodes: list[int | None]
    ranks: list[RankOutcome] = field(default_factory=list)
    agent_output: str = ""
    pids: list[int] = field(default_factory=list)  # every process the job started (agents and ranks)
    run_dir: Path | None = None

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def ok(self) -> bool:
        return (not self.timed_out and all(rc == 0 for rc in self.returncodes)
                and len(self.ranks) == self.world_size and all(r.status == "ok" for r in self.ranks))

    @property
    def results(self) -> list[Any]:
        """Each rank's reported result (None where a rank reported nothing), indexed by rank."""
        return [r.result for r in self.ranks]

    @property
    def command(self) -> str:
        """The (first) torchrun command, as one shell line."""
        return shlex.join(self.commands[0]) if self.commands else ""

    @property
    def message(self) -> str:
        """One line: what happened."""
        n = self.world_size
        if self.ok:
            return f"{n} ranks ({self.backend.name}) finished in {self.seconds:.1f} s"
        if self.timed_out:
            stuck = [r for r in self.ranks if r.status == "timeout"]
            waiting = [r for r in stuck if r.waiting_in]
            culprits = [r for r in stuck if not r.waiting_in] or stuck
            parts = []
            for r in culprits:
                bits = [f"last step {r.step!r}"] if r.step else []
                if not r.started:
                    bits.append("it had not started yet: torchrun and `import torch` were still loading")
                if r.where:
                    bits.append(f"at {r.where}")
                parts.append(f"rank {r.rank}" + (f" ({', '.join(bits)})" if bits else ""))
            msg = f"{'; '.join(parts) or 'no rank'} did not finish within {self.timeout_s:g} s"
            others = [r for r in waiting if r not in culprits]
            if others:
                calls = sorted({r.waiting_in for r in others if r.waiting_in})
                msg += f"; {_who([r.rank for r in others])} waiting for it in {', '.join(calls)}()"
            done = [r.rank for r in self.ranks if r.status == "ok"]
            if done:
                msg += f"; {_who(done, 'had', 'had')} finished"
            return msg + "; every process was stopped"
        failed = sorted([r for r in self.ranks if r.status in ("raised", "failed")],
                        key=lambda r: (r.error_time is None, r.error_time or 0.0, r.rank))
        if failed:
            first = failed[0]
            what = f"raised {_short(first.error)}" if first.status == "raised" and first.error else \
                f"exited with code {first.exit_code}"
            msg = f"rank {first.rank} {what}"
            later = failed[1:]
            if later:
                steps = sorted({r.step for r in later if r.step})
                msg += (f"; then {_who([r.rank for r in later], 'failed', 'failed')} too"
                        + (f" (in {', '.join(repr(s) for s in steps)}, waiting for it)" if steps else ""))
            stopped = [r.rank for r in self.ranks if r.status in ("stopped", "unknown")]
            if stopped:
                msg += f"; {_who(stopped)} stopped"
            return msg
        if len(self.ranks) < n:
            return f"only {len(self.ranks)} of {n} ranks started (torchrun exit codes {self.returncodes})"
        bad = [r for r in self.ranks if r.status != "ok"]
        if bad:
            return f"{_who([r.rank for r in bad], 'did', 'did')} not finish ({bad[0].status})"
        return f"torchrun exited with {self.returncodes} although every rank finished"

    def report(self, lines: int = 15) -> str:
        """The one-line message, then each rank that did not finish with the tail of its output."""
        out = [self.message]
        for r in self._failed_first():
            if r.status == "ok":
                continue
            out.append(f"--- rank {r.rank}: {r.status}" + (f" ({_short(r.error, 120)})" if r.error else "")
                       + (f", last step {r.step!r}" if r.step else "") + " ---")
            out.append(r.tail(lines) or "(no output)")
        if not self.ok and not self.ranks and self.agent_output:
            out.append("--- torchrun ---")
            out.append("\n".join(self.agent_output.strip().splitlines()[-lines:]))
        return "\n".join(out)

    def _failed_first(self) -> list[RankOutcome]:
        """Ranks in the order that explains the failure: the first to raise, or the stuck ones, first."""
        def key(r: RankOutcome):
            if r.status in ("raised", "failed"):
                return (0, r.error_time is None, r.error_time or 0.0, r.rank)
            if r.status == "timeout":
                return (0 if not r.waiting_in else 1, False, 0.0, r.rank)
            return (2, False, 0.0, r.rank)
        return sorted(self.ranks, key=key)

    def raise_for_status(self) -> LaunchResult:
        if not self.ok:
            raise DistRunError(self.message, self)
        return self

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "nproc": self.nproc, "nnodes": self.nnodes, "world_size": self.world_size,
                "backend": self.backend.name, "device": self.backend.device, "backend_reason": self.backend.reason,
                "ok": self.ok, "message": self.message, "seconds": round(self.seconds, 3),
                "timeout_s": self.timeout_s, "timed_out": self.timed_out, "returncodes": self.returncodes,
                "command": self.command, "ranks": [r.as_dict() for r in self.ranks]}

    def _repr_pretty_(self, p, cycle):  # pragma: no cover - display only
        p.text(self.report())


def _ranks(xs: list[int]) -> str:
    return ", ".join(str(x) for x in xs)


def _who(xs: list[int], singular: str = "was", plural: str = "were") -> str:
    """'rank 1 was' / 'ranks 0, 2 were'."""
    return f"rank {xs[0]} {singular}" if len(xs) == 1 else f"ranks {_ranks(xs)} {plural}"


def _short(text: str | None, limit: int = 160) -> str:
    text = text or ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ----------------------------------------------------------------------------- launching
def launch_agent(device: str = "cpu") -> str:
    """The agent `launch` starts: torchrun's own, with ranks forked from it (`perflab.distributed.agent`:
    torch is imported once per node, not once per rank) for CPU ranks on Linux; plain
    `torch.distributed.run` for ranks on a GPU, elsewhere, or when PERFLAB_LAUNCH=torchrun.

    GPU ranks are never forked: torchrun's `LaunchConfig` asks `torch.cuda.is_available()` in the
    agent, which marks the process so that every child it forks raises "Cannot re-initialize CUDA in
    forked subprocess" at its first CUDA call (seen on an H200 with torch 2.11)."""
    if (os.environ.get("PERFLAB_LAUNCH", "").lower() == "torchrun" or not sys.platform.startswith("linux")
            or device == "cuda"):
        return "torch.distributed.run"
    return "perflab.distributed.agent"


def launch(target: str, nproc: int = 2, args: list[Any] | tuple[Any, ...] = (), *, nnodes: int = 1,
           timeout: float = 120.0, backend: str | None = None, env: dict[str, str] | None = None,
           keep_dir: bool = False, bind: bool = False) -> LaunchResult:
    """Run `target` (a module such as perflab.distributed.workers.collectives, or a .py path) on nproc × nnodes ranks.

    bind: start every rank through `perflab.numa.bound`, which binds it to its own cores (lesson
    08's plan: its GPU's node, whole cores, none shared) with numactl where installed, else with
    os.sched_setaffinity, before the program runs.

    Returns a LaunchResult whatever happened (check `.ok`, or call `.raise_for_status()`); raises
    InputError for arguments that cannot work, and KeyboardInterrupt (after stopping everything) if
    interrupted.
    """
    nproc = positive_int("nproc", nproc, maximum=MAX_NPROC)
    nnodes = positive_int("nnodes", nnodes, maximum=MAX_NNODES)
    try:
        timeout = float(timeout)
    except (TypeError, ValueError):
        raise InputError(f"timeout must be a number of seconds (got {timeout!r})") from None
    if not timeout > 0:
        raise InputError(f"timeout must be > 0 seconds (got {timeout:g})")
    target = str(target)
    if target.endswith(".py"):
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise InputError(f"worker script {target!r} not found")
        target = str(path)
    choice = choose_backend(nproc, backend)
    if bind:  # the rank runs `python -m perflab.numa.bound TARGET ARGS`: the module is named, not imported
        args, target = [target, *args], "perflab.numa.bound"

    # the job's devices take turns with other measurements (perflab.core.lock); its ranks inherit
    # the hold and do not wait for their own launcher. Waiting does not count against `timeout`.
    import torch

    from perflab.core.lock import devices_lock

    devices = ([f"cuda:{i}" for i in range(min(torch.cuda.device_count(), nproc * nnodes))]
               if choice.device == "cuda" else ["cpu"])
    with devices_lock(devices, label=f"torchrun {target} ×{nproc * nnodes}"):
        return _launch(target, nproc, nnodes, args, timeout, choice, env, keep_dir)


# Set by a caller that runs code it does not trust on the ranks (perflab grade's judge, lab 06): each
# agent's command, and the run's folder, in; the command that runs it confined out.
CONFINE: Callable[[list[str], Path], list[str]] | None = None


def _launch(target: str, nproc: int, nnodes: int, args: list[Any] | tuple[Any, ...], timeout: float,
            choice: BackendChoice, env: dict[str, str] | None, keep_dir: bool) -> LaunchResult:
    from perflab.distributed import agent as agent_mod

    run_dir = Path(tempfile.mkdtemp(prefix="perflab-run-"))
    envs = worker_env(run_dir, choice.name, env)
    commands = [torchrun_command(target, nproc, [str(a) for a in args], nnodes=nnodes,
                                 rdzv_endpoint=str(run_dir / "rendezvous"), rdzv_id=run_dir.name,
                                 log_dir=run_dir / "logs" / f"node{i}", agent=launch_agent(choice.device))
                for i in range(nnodes)]
    procs: list[_Process] = []
    logs = []
    tracked: dict[int, Any] = {}
    t0 = time.monotonic()
    deadline = t0 + timeout
    dump_at = deadline - min(1.0, 0.1 * timeout)
    timed_out = dumped = interrupted = False
    try:
        for i, cmd in enumerate(commands):
            log = open(run_dir / f"agent{i}.log", "wb")
            logs.append(log)
            if CONFINE is not None:  # untrusted ranks: a fresh, confined agent, never one forked from this process
                procs.append(subprocess.Popen(CONFINE(cmd, run_dir), stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, env=envs, start_new_session=True))
            elif cmd[1:3] == ["-m", "perflab.distributed.agent"] and agent_mod.can_fork_agents():
                # forked from a server that has torch imported already (see perflab.distributed.agent)
                procs.append(agent_mod.ForkedAgent(cmd[3:], envs, run_dir / f"agent{i}.log"))
            else:
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                              env=envs, start_new_session=True))
        while any(p.poll() is None for p in procs):
            _track(procs, run_dir, tracked)
            now = time.monotonic()
            if now >= dump_at and not dumped:
                _dump_stacks(run_dir, tracked)
                dumped = True
            if now >= deadline:
                timed_out = True
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        _track(procs, run_dir, tracked)
        _stop(procs, tracked)
        for log in logs:
            log.close()
    seconds = time.monotonic() - t0
    result = LaunchResult(target=target, nproc=nproc, nnodes=nnodes, backend=choice, commands=commands,
                          seconds=seconds, timeout_s=timeout, timed_out=timed_out,
                          returncodes=[p.returncode for p in procs],
                          pids=sorted(set([p.pid for p in procs]) | set(tracked)), run_dir=run_dir if keep_dir else None)
    result.agent_output = "\n".join(_read(run_dir / f"agent{i}.log") for i in range(nnodes))
    result.ranks = _outcomes(run_dir, nproc, nnodes, result)
    if not keep_dir:
        shutil.rmtree(run_dir, ignore_errors=True)
    if interrupted:
        raise KeyboardInterrupt
    return result


def _track(procs: list[_Process], run_dir: Path, tracked: dict[int, Any]) -> None:
    """Remember every descendant of the agents (ranks live in sessions of their own)."""
    import psutil

    for p in procs:
        try:
            for child in psutil.Process(p.pid).children(recursive=True):
                tracked.setdefault(child.pid, child)
        except psutil.Error:
            pass
    for where in run_dir.glob("rank*.where.json"):
        try:
            pid = int(json.loads(where.read_text())["pid"])
        except (OSError, ValueError, KeyError):
            continue
        if pid not in tracked:
            try:
                tracked[pid] = psutil.Process(pid)
            except psutil.Error:
                pass


def _dump_stacks(run_dir: Path, tracked: dict[int, Any]) -> None:
    """Ask every still-running rank that registered faulthandler (runtime.join) to print its stack."""
    import psutil

    pids = set()
    for where in run_dir.glob("rank*.where.json"):
        try:
            pids.add(int(json.loads(where.read_text())["pid"]))
        except (OSError, ValueError, KeyError):
            continue
    for pid in pids:
        proc = tracked.get(pid)
        if proc is None or not hasattr(signal, "SIGUSR1"):
            continue
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                proc.send_signal(signal.SIGUSR1)
        except psutil.Error:
            pass
    time.sleep(0.3)


def _stop(procs: list[_Process], tracked: dict[int, Any]) -> None:
    """SIGTERM every agent's process group and every tracked rank, then SIGKILL what is left."""
    import psutil

    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        _signal_group(p.pid, signal.SIGTERM)
    for proc in list(tracked.values()):
        try:
            proc.terminate()
        except psutil.Error:
            pass
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and (any(p.poll() is None for p in procs) or _any_alive(tracked)):
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            _signal_group(p.pid, signal.SIGKILL)
    for proc in list(tracked.values()):
        try:
            if proc.is_running():
                proc.kill()
        except psutil.Error:
            pass
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not fail
            pass
    psutil.wait_procs(list(tracked.values()), timeout=2)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _any_alive(tracked: dict[int, Any]) -> bool:
    import psutil

    for proc in tracked.values():
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            continue
    return False


# ----------------------------------------------------------------------------- reading what ranks left
def _read(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-TAIL_CHARS:].decode("utf-8", errors="replace")


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


_SUMMARY = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning)\b.*)$")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+) in (\S+)')


def _rank_logs(run_dir: Path, nproc: int, nnodes: int, wheres: dict[int, dict]) -> dict[int, Path]:
    """Map each global rank to its log folder (attempt_0/<local_rank>)."""
    out: dict[int, Path] = {}
    for rank, w in wheres.items():
        if w and w.get("log_dir") and Path(w["log_dir"]).is_dir():
            out[rank] = Path(w["log_dir"])
    for node in range(nnodes):
        for d in sorted((run_dir / "logs" / f"node{node}").glob("*/attempt_*/*")):
            if not d.name.isdigit():
                continue
            rank = node * nproc + int(d.name)  # the usual assignment when a rank did not say where it was
            if rank not in out and d not in out.values():
                out[rank] = d
    return out


def parse_exception(stderr: str) -> str | None:
    """The last exception line of the last traceback in `stderr` ("ValueError: boom"), if any."""
    if "Traceback" not in stderr:
        return None
    block = stderr[stderr.rindex("Traceback"):]
    found = None
    for line in block.splitlines():
        m = _EXC_LINE.match(line.strip())
        if m:
            found = m.group(1)
    return found


def parse_stack_dump(stderr: str) -> tuple[str | None, str | None]:
    """From a faulthandler dump: ("faulty.py:34 in body, inside all_reduce()", "all_reduce").

    The first is the innermost frame outside torch (and the call it was in); the second is the
    torch.distributed function the rank was blocked in, or None if it was somewhere else.
    """
    idx = max(stderr.rfind("Current thread"), stderr.rfind("Thread 0x"))
    if idx < 0:
        return None, None
    frames = []
    for line in stderr[idx:].splitlines()[1:]:
        m = _FRAME.match(line)
        if not m:
            if frames:
                break
            continue
        frames.append((m.group(1), int(m.group(2)), m.group(3)))
    if not frames:
        return None, None

    def in_torch(f):
        return "/torch/" in f[0].replace("\\", "/")

    inner = frames[0]
    mine = next((f for f in frames if not in_torch(f) and not f[0].endswith("runtime.py")), inner)
    text = f"{Path(mine[0]).name}:{mine[1]} in {mine[2]}"
    waiting = None
    if mine is not inner:
        torch_frames = [f for f in frames[: frames.index(mine)] if in_torch(f)]
        outer = torch_frames[-1] if torch_frames else inner
        call = outer[2] if outer[2] != "wrapper" else inner[2]
        text += f", inside {call}()"
        if "/torch/distributed/" in inner[0].replace("\\", "/"):
            waiting = call
    return text, waiting


def _outcomes(run_dir: Path, nproc: int, nnodes: int, res: LaunchResult) -> list[RankOutcome]:
    world = nproc * nnodes
    wheres = {r: _json(run_dir / f"rank{r}.where.json") for r in range(world)}
    wheres = {r: w for r, w in wheres.items() if w}
    logs = _rank_logs(run_dir, nproc, nnodes, wheres)
    exit_codes = {}
    for m in _SUMMARY.finditer(res.agent_output):
        exit_codes[int(m.group(1))] = int(m.group(3))
    all_zero = all(rc == 0 for rc in res.returncodes)
    out = []
    for rank in range(world):
        d = logs.get(rank)
        o = RankOutcome(rank=rank, status="unknown")
        if d is not None:
            o.stdout = _read(d / "stdout.log")
            o.stderr = _read(d / "stderr.log")
        w = wheres.get(rank) or {}
        o.started = bool(w) or bool(o.stdout.strip())
        o.pid, o.local_rank, o.node = w.get("pid"), w.get("local_rank"), w.get("node")
        if o.local_rank is None:
            o.local_rank, o.node = rank % nproc, rank // nproc
        step = _json(run_dir / f"rank{rank}.step.json")
        o.step = step.get("step") if isinstance(step, dict) else None
        o.result = _json(run_dir / f"rank{rank}.result.json")
        err = _json(run_dir / f"rank{rank}.error.json")
        o.exit_code = exit_codes.get(rank)
        if (run_dir / f"rank{rank}.done").exists():
            o.status = "ok"
            o.exit_code = 0 if o.exit_code is None else o.exit_code
        elif isinstance(err, dict):
            o.status = "raised"
            o.error = f"{err.get('type')}: {err.get('message')}" if err.get("message") else str(err.get("type"))
            o.error_time = err.get("time")
        elif res.timed_out:
            o.status = "timeout"
        elif o.exit_code is not None:
            if o.exit_code == 0:
                o.status = "ok"
            elif o.exit_code < 0:
                o.status = "stopped"
            else:
                o.error = parse_exception(o.stderr)
                o.status = "raised" if o.error else "failed"
        elif all_zero:
            o.status, o.exit_code = "ok", 0  # a plain script: torchrun exits 0 only when every rank did
        else:
            o.error = parse_exception(o.stderr)
            o.status = "raised" if o.error else "stopped"
        if o.status in ("timeout", "stopped", "unknown"):
            o.where, o.waiting_in = parse_stack_dump(o.stderr)
        out.append(o)
    return out


# ----------------------------------------------------------------------------- convenience
def run_worker(module: str, nproc: int = 2, args: list[Any] | tuple[Any, ...] = (), **kw) -> LaunchResult:
    """`launch` a perflab worker and raise DistRunError (with the report) unless every rank finished."""
    res = launch(module, nproc, args, **kw)
    if not res.ok:
        raise DistRunError(res.report(), res)
    return res
