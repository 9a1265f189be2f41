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

The job's result is a `perflab.distributed.outcome.LaunchResult` (its ranks read back from the run
folder by `perflab.distributed.ranklogs`); the processes are tracked and stopped by
`perflab.distributed.processes`. Those names are importable from here too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from perflab.core.errors import InputError
from perflab.core.validate import positive_int
from perflab.distributed.outcome import BackendChoice, DistRunError, LaunchResult, RankOutcome
from perflab.distributed.processes import Process, dump_stacks, stop, track
from perflab.distributed.ranklogs import outcomes, parse_exception, parse_stack_dump, read_tail
from perflab.distributed.workers.runtime import ENV_BACKEND, ENV_RUN_DIR

__all__ = ["BackendChoice", "DistRunError", "LaunchResult", "RankOutcome", "choose_backend", "torchrun_command",
           "cluster_command", "slurm_script", "worker_env", "launch_agent", "launch", "run_worker",
           "parse_exception", "parse_stack_dump", "CONFINE"]

MAX_NPROC = 64
MAX_NNODES = 8
PYNVML_WARNING = "ignore:The pynvml package is deprecated:FutureWarning"


# ----------------------------------------------------------------------------- backend choice
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
    procs: list[Process] = []
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
            track(procs, run_dir, tracked)
            now = time.monotonic()
            if now >= dump_at and not dumped:
                dump_stacks(run_dir, tracked)
                dumped = True
            if now >= deadline:
                timed_out = True
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        track(procs, run_dir, tracked)
        stop(procs, tracked)
        for log in logs:
            log.close()
    seconds = time.monotonic() - t0
    result = LaunchResult(target=target, nproc=nproc, nnodes=nnodes, backend=choice, commands=commands,
                          seconds=seconds, timeout_s=timeout, timed_out=timed_out,
                          returncodes=[p.returncode for p in procs],
                          pids=sorted(set([p.pid for p in procs]) | set(tracked)), run_dir=run_dir if keep_dir else None)
    result.agent_output = "\n".join(read_tail(run_dir / f"agent{i}.log") for i in range(nnodes))
    result.ranks = outcomes(run_dir, nproc, nnodes, result)
    if not keep_dir:
        shutil.rmtree(run_dir, ignore_errors=True)
    if interrupted:
        raise KeyboardInterrupt
    return result



# ----------------------------------------------------------------------------- convenience
def run_worker(module: str, nproc: int = 2, args: list[Any] | tuple[Any, ...] = (), **kw) -> LaunchResult:
    """`launch` a perflab worker and raise DistRunError (with the report) unless every rank finished."""
    res = launch(module, nproc, args, **kw)
    if not res.ok:
        raise DistRunError(res.report(), res)
    return res
