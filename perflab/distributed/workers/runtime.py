"""What a worker does inside its rank: join the process group, mark its steps, report, leave cleanly.

    >>> from perflab.distributed.workers import runtime
    >>> def body(ctx):                      # ctx: RankContext (rank, world_size, device, ...)
    ...     ctx.step("all_reduce")          # where this rank is, if it ever hangs
    ...     x = torch.ones(4, device=ctx.device); dist.all_reduce(x)
    ...     return {"sum": x.tolist()}      # handed back to the launcher as this rank's result
    >>> runtime.run(body)                   # at the bottom of a worker module's main()

Launched by `perflab.distributed.torchrun.launch`, a rank finds the run's folder in $PERFLAB_RUN_DIR and writes
there: `rank<r>.where.json` (pid, local rank, node, log folder), `rank<r>.step.json` (its last
step), `rank<r>.result.json`, `rank<r>.error.json` (if it raised) and `rank<r>.done` (after a clean
exit). It joins the group through a `FileStore` in that folder, so no TCP port is opened for the
rendezvous, and `faulthandler` dumps its Python stack on SIGUSR1 so the launcher can show where a
hung rank was. Launched by a plain `torchrun` (a cluster, no $PERFLAB_RUN_DIR) it joins with
`env://` (MASTER_ADDR/MASTER_PORT) and prints its result as one `PERFLAB_RESULT {json}` line.

Leaving cleanly matters: DDP on gloo sometimes aborts at interpreter exit unless the model is
dropped, garbage is collected and every rank passes a barrier before `destroy_process_group()`.
"""

from __future__ import annotations

import datetime as _dt
import faulthandler
import gc
import json
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.core.results import jsonable

ENV_RUN_DIR = "PERFLAB_RUN_DIR"
ENV_BACKEND = "PERFLAB_BACKEND"
ENV_PG_TIMEOUT = "PERFLAB_PG_TIMEOUT_S"
FORKED_ENV = "PERFLAB_RANK_FORKED"  # set by perflab.distributed.agent: this rank was forked, not exec'd
RESULT_PREFIX = "PERFLAB_RESULT "


@dataclass
class RankContext:
    """Who this process is in the job, and where it reports."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node: int  # torchrun's GROUP_RANK: which node (agent) this rank belongs to
    backend: str
    device: Any  # torch.device
    run_dir: Path | None

    @property
    def is_main(self) -> bool:
        """True on global rank 0 only: one process in the whole job (logging, checkpoints)."""
        return self.rank == 0

    @property
    def is_local_main(self) -> bool:
        """True on local rank 0 of every node: one process per machine (node-local downloads, caches)."""
        return self.local_rank == 0

    def _write(self, name: str, obj: Any) -> None:
        if self.run_dir is None:
            return
        path = self.run_dir / f"rank{self.rank}.{name}"
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(obj, default=jsonable))
        os.replace(tmp, path)  # readers never see half a file

    def step(self, name: str) -> None:
        """Record the step this rank is entering (shown if the job hangs or fails)."""
        self._write("step.json", {"step": name, "time": time.time()})

    def report(self, obj: Any) -> None:
        """Hand `obj` (JSON-able) to the launcher as this rank's result."""
        if self.run_dir is None:
            print(RESULT_PREFIX + json.dumps({"rank": self.rank, "result": obj}, default=jsonable), flush=True)
        else:
            self._write("result.json", obj)


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def default_backend(local_world_size: int) -> str:
    """nccl when every local rank can have its own GPU, else gloo."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= local_world_size:
        return "nccl"
    return "gloo"


def context_from_env(backend: str | None = None) -> RankContext:
    """The RankContext torchrun's environment describes (no process group is created)."""
    import torch

    world = _env_int("WORLD_SIZE", 1)
    local_world = _env_int("LOCAL_WORLD_SIZE", world)
    backend = backend or os.environ.get(ENV_BACKEND) or default_backend(local_world)
    local_rank = _env_int("LOCAL_RANK", 0)
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    run_dir = os.environ.get(ENV_RUN_DIR)
    return RankContext(rank=_env_int("RANK", 0), world_size=world, local_rank=local_rank, local_world_size=local_world,
                       node=_env_int("GROUP_RANK", 0), backend=backend, device=device,
                       run_dir=Path(run_dir) if run_dir else None)


def join(backend: str | None = None, *, init: bool = True) -> RankContext:
    """Set this rank up (stack dumps on SIGUSR1, its GPU) and, with `init`, join the process group."""
    import torch

    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    ctx = context_from_env(backend)
    if ctx.device.type == "cuda":
        torch.cuda.set_device(ctx.device)
    log_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    ctx._write("where.json", {"pid": os.getpid(), "local_rank": ctx.local_rank, "node": ctx.node,
                              "host": socket.gethostname(), "log_dir": str(Path(log_file).parent) if log_file else None})
    if init:
        init_group(ctx)
    return ctx


def init_group(ctx: RankContext) -> None:
    """init_process_group for this rank: a FileStore in the run folder when launched by perflab, else env://."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    timeout = _dt.timedelta(seconds=_env_int(ENV_PG_TIMEOUT, 600))
    kwargs: dict[str, Any] = {"backend": ctx.backend, "rank": ctx.rank, "world_size": ctx.world_size, "timeout": timeout}
    if ctx.device.type == "cuda":
        kwargs["device_id"] = ctx.device
    if ctx.run_dir is not None:
        kwargs["store"] = dist.FileStore(str(ctx.run_dir / "store"), ctx.world_size)  # pyright: ignore[reportPrivateImportUsage]  # public, documented; absent from __all__
    else:
        kwargs["init_method"] = "env://"
    dist.init_process_group(**kwargs)


def leave(ctx: RankContext) -> None:
    """Leave the group cleanly: collect garbage, meet at a barrier, destroy the group, mark done."""
    import torch.distributed as dist

    ctx.step("leaving")
    gc.collect()
    if dist.is_initialized():
        if ctx.device.type == "cuda":
            dist.barrier(device_ids=[ctx.device.index])
        else:
            dist.barrier()
        dist.destroy_process_group()
    ctx._write("done", {"time": time.time()})


def record_error(exc: BaseException, ctx: RankContext | None = None) -> None:
    """Write rank<r>.error.json with the exception's one-line summary and traceback."""
    run_dir = os.environ.get(ENV_RUN_DIR)
    if not run_dir:
        return
    rank = ctx.rank if ctx else _env_int("RANK", 0)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    obj = {"type": type(exc).__name__, "message": text, "time": time.time(),
           "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:]}
    path = Path(run_dir) / f"rank{rank}.error.json"
    try:
        path.write_text(json.dumps(obj))
    except OSError:  # pragma: no cover - the folder may be gone if the launcher gave up
        pass


def run(body: Callable[[RankContext], Any], backend: str | None = None, *, init: bool = True,
        fast_exit: bool = True) -> None:
    """Join, run `body(ctx)`, report what it returns, leave. An exception is recorded, then re-raised.

    With `fast_exit` (the default), a rank that has left the group cleanly ends with `os._exit(0)`
    once its output is flushed: tearing down an interpreter that holds torch takes about a second
    per rank, and it is where DDP on gloo has been seen to abort ("terminate called without an
    active exception") after the work was done. A rank forked by `perflab.distributed.agent` returns
    instead: its process already ends with `os._exit` once the agent has its exit status.
    """
    ctx = None
    try:
        ctx = join(backend, init=init)
        result = body(ctx)
        if result is not None:
            ctx.report(result)
        leave(ctx)
    except SystemExit as e:
        if e.code not in (None, 0):
            record_error(e, ctx)
        raise
    except BaseException as e:
        record_error(e, ctx)
        raise
    if fast_exit and not os.environ.get(FORKED_ENV):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def main(prog: str, add_arguments: Callable[[Any], None], body: Callable[[RankContext, Any], Any],
         argv: list[str] | None = None, *, init: bool = True) -> None:
    """A worker's whole `main`: parse its options (`add_arguments(parser)` declares them), then
    `run(lambda ctx: body(ctx, options))` inside the rank."""
    import argparse

    p = argparse.ArgumentParser(prog=prog)
    add_arguments(p)
    options = p.parse_args(argv)
    run(lambda ctx: body(ctx, options), init=init)
