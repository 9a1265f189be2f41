"""A real training step with a planted fault (one switch each), profiled with `torch.profiler`.

    >>> run = profile_step("tiny-gpt", fault="loader", steps=2, trace_out="loader.json")
    >>> run.diagnosis.top.cause        # 'data_wait'
    >>> run.trace_path                 # open it in https://ui.perfetto.dev (or chrome://tracing)

The step is perflab's: `build_model`, batches of `perflab.workload.data.SlowTokens` served by a
DataLoader, and the course's training step (`perflab.workload.train.StepRunner`: the next-token
loss, backward, AdamW), with `record_function` ranges around its phases ("forward", "backward",
"optimizer", "zero_grad"). The faults, each the textbook form of one cause of device idle time:

| fault | what is planted | cause it shows | the fix (`fixed=True`) |
| --- | --- | --- | --- |
| loader | the dataset waits `loader_ms` per batch on "slow storage" (a sleep stands for the read), num_workers=0 | data_wait | 4 workers load ahead |
| sync | a forward hook on every Linear checks the output for NaN (`.item()`) and computes percentiles on the host (`.cpu().numpy()`; of the first `sync_values` values where set) | host_sync | no per-layer check |
| launch | an EMA of the weights updated one row at a time in Python: thousands of tiny ops per step | launch_bound | one `_foreach_lerp_` |
| comm | 2 ranks (gloo): after backward every gradient is all-reduced one tensor at a time, nothing overlapped | communication | DDP: bucketed all-reduce overlapped with backward |

On a CPU a sync by itself costs nothing (there is no queue of device work to drain): what the
`sync` fault costs is the host work that waits for the value, which is what a sync costs on a GPU
too, plus the drained pipeline. The fault sizes were chosen so that on a laptop CPU each one's
cause is well above `NONE_THRESHOLD` of the step; `none` stays below it.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from perflab.core.errors import InputError
from perflab.core.stderr import quiet_stderr
from perflab.core.validate import positive_int
from perflab.profiling.diagnose import Diagnosis, diagnose

FAULTS = ("none", "loader", "sync", "launch", "comm")
EXPECTED = {"none": None, "loader": "data_wait", "sync": "host_sync", "launch": "launch_bound", "comm": "communication"}


@dataclass(frozen=True)
class FaultSizes:
    loader_ms: float = 40.0  # per batch, on "storage"
    launch_rows: int = 1000  # weight rows the EMA walks one at a time (≈ 3 tiny ops each)
    sync_values: int | None = None  # values of each Linear's output the `sync` check's statistics read (None: all)


def check_fault(fault: str) -> str:
    f = str(fault).strip().lower()
    if f not in FAULTS:
        raise InputError(f"unknown fault {fault!r}: use one of {', '.join(FAULTS)}")
    return f


def host_check(values: int | None = None):
    """The `sync` fault's forward hook: per layer, a NaN check that reads a value back, then host-side
    statistics of the output (its first `values` values; None: all of them)."""
    import numpy as np

    def hook(module, inputs, out):
        if not bool(torch.isfinite(out).all().item()):  # .item(): the host waits for the device
            raise FloatingPointError("non-finite activations")
        x = out.detach() if values is None else out.detach().flatten()[:values]
        np.percentile(x.float().cpu().numpy(), [1, 50, 99])  # .cpu(): a copy back, another wait

    return hook


_host_check_hook = host_check()  # every value, as the fault has always read them


class WeightEMA:
    """An exponential moving average of the weights, updated after every optimizer step.

    `looped=True` is the `launch` fault: the update walks `rows` weight rows one at a time in
    Python (≈ 3 tiny ops per row); `looped=False` is the fix, one `torch._foreach_lerp_` over the
    same rows."""

    def __init__(self, model: torch.nn.Module, rows: int, decay: float = 0.999):
        self.pairs = []
        left = rows
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() != 2 or left <= 0:
                    continue
                k = min(left, p.shape[0])
                self.pairs.append((p, p[:k].detach().clone()))
                left -= k
        self.decay = decay

    @torch.no_grad()
    def update(self, looped: bool) -> None:
        if looped:
            for p, ema in self.pairs:
                for r in range(ema.shape[0]):
                    ema[r].lerp_(p[r], 1 - self.decay)
        else:
            torch._foreach_lerp_([e for _, e in self.pairs], [p[: e.shape[0]] for p, e in self.pairs],  # pyright: ignore[reportPrivateImportUsage]  # the fused op optimizers use; no public name
                                 1 - self.decay)


@dataclass
class ProfileRun:
    fault: str
    fixed: bool
    trace_path: str
    diagnosis: Diagnosis
    wall_s: list[float]  # each profiled step, host wall clock
    preset: str
    batch: int
    seq: int
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def expected(self) -> str | None:
        return EXPECTED[self.fault] if not self.fixed else None


def make_step(cfg, fault: str, *, fixed: bool = False, batch: int = 4, seq: int = 64, n_batches: int = 8,
              sizes: FaultSizes = FaultSizes(), device=None, seed: int = 0, world: int = 1):
    """(model, optimizer, loader, step(batch)) for one fault; `fixed=True` applies its fix.
    For `comm`, call inside a process group of `world` ranks.

    The step is the course's (`perflab.workload.train.StepRunner`), its phases in `record_function`
    ranges ("forward", "backward", "optimizer", "zero_grad"); the `comm` fault's gradient sync runs after
    the backward and the `launch` fault's weight EMA after the step, as its hooks. The loader serves
    whole batches of `perflab.workload.data.SlowTokens`."""
    from torch.profiler import record_function

    from perflab.workload.data import SlowTokens
    from perflab.workload.models import build_model
    from perflab.workload.optim import make_optimizer
    from perflab.workload.train import StepRunner

    fault = check_fault(fault)
    device = torch.device(device or "cpu")
    model = build_model(cfg, device=device, seed=seed)
    if fault == "comm" and fixed:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=4)
    opt = make_optimizer(model.parameters(), "adamw-foreach")
    delay = sizes.loader_ms / 1e3 if fault == "loader" else 0.0
    workers = 4 if (fault == "loader" and fixed) else 0
    import warnings  # 4 workers on 2 cores is deliberate: they mostly wait on "storage", so DataLoader's
    # core-count warning (given when the loader is made and when its workers start) does not apply

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        loader = torch.utils.data.DataLoader(SlowTokens(n_batches, seq, cfg.vocab, delay, seed=seed, batch=batch),
                                             batch_size=None, shuffle=False, num_workers=workers,
                                             persistent_workers=workers > 0, prefetch_factor=4 if workers else None)
        if workers:  # start the (persistent) workers now, not inside the profiled steps
            next(iter(loader))
    if fault == "sync" and not fixed:
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                m.register_forward_hook(host_check(sizes.sync_values))
    hooks: dict[str, list] = {}
    if fault == "comm" and not fixed:
        import torch.distributed as dist

        def gradient_sync(runner, i):
            with record_function("gradient sync"):
                for p in model.parameters():
                    if p.grad is not None:
                        dist.all_reduce(p.grad)
                        p.grad.div_(world)

        hooks["after_backward"] = [gradient_sync]
    if fault == "launch":
        ema = WeightEMA(model, sizes.launch_rows)

        def ema_update(runner, i):
            with record_function("weight EMA"):
                ema.update(looped=not fixed)

        hooks["after_step"] = [ema_update]
    ranges = {"optimizer step": "optimizer"}  # the lesson's range names
    runner = StepRunner(model, opt, device=device, hooks=hooks,
                        phase=lambda name, i: record_function(ranges.get(name, name)))

    def step(b) -> torch.Tensor:
        runner.step([tuple(t.to(device, non_blocking=True) for t in b)])
        return runner.micro_losses[-1]  # the step's loss, detached

    return model, opt, loader, step


def run_profiled(step, loader, *, steps: int, trace_out: str | Path, wait: int = 1, warmup: int = 1,
                 record_shapes: bool = True, profile_memory: bool = False, with_stack: bool = False) -> list[float]:
    """Run `wait + warmup + steps` steps under torch.profiler with that schedule; export the active
    steps' trace to `trace_out` (Chrome JSON). Returns each active step's wall seconds."""
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    total = wait + warmup + steps
    walls: list[float] = []
    exported = []

    def ready(p):
        p.export_chrome_trace(str(trace_out))
        exported.append(True)

    import warnings

    with warnings.catch_warnings(), \
            profile(activities=activities, schedule=schedule(wait=wait, warmup=warmup, active=steps, repeat=1),
                    record_shapes=record_shapes, profile_memory=profile_memory, with_stack=with_stack,
                    on_trace_ready=ready) as prof:
        warnings.filterwarnings("ignore", message="This DataLoader will create")  # see make_step
        i = 0
        while i < total:
            for b in loader:
                if i >= total:
                    break
                t0 = time.perf_counter()
                step(b)
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                if i >= wait + warmup:
                    walls.append(time.perf_counter() - t0)
                prof.step()
                i += 1
    if not exported:  # pragma: no cover - the schedule always completes above
        raise RuntimeError("the profiler's active window did not complete")
    return walls


def _trace_path(trace_out, fault: str) -> Path:
    if trace_out is not None:
        p = Path(trace_out).expanduser()
        if p.parent and not p.parent.exists():
            raise InputError(f"folder {str(p.parent)!r} does not exist: choose --trace-out in an existing folder")
        return p
    return Path(tempfile.mkdtemp(prefix="perflab-trace-")) / f"step_{fault}.json"


@quiet_stderr()  # the profiler's own lines (USDT/STAGE, allocator notes) stay off the learner's stderr
def profile_step(preset: str = "tiny-gpt", fault: str = "none", *, fixed: bool = False, steps: int = 2,
                 batch: int = 4, seq: int = 64, trace_out: str | Path | None = None, sizes: FaultSizes = FaultSizes(),
                 record_shapes: bool = True, profile_memory: bool = False, with_stack: bool = False,
                 timeout: float = 120.0, threads: int | None = 1, launcher: str = "torchrun") -> ProfileRun:
    """Profile `steps` training steps of `preset` with `fault` planted, export the trace, diagnose it.

    threads: torch's CPU threads while profiling (restored after); 1 by default, because on a small
    or busy machine OpenMP threads waiting for each other stretch every op unpredictably and hide
    the pattern being diagnosed. None keeps the current setting.
    launcher: for `comm`, 'torchrun' (perflab.distributed's launcher: fresh processes, the way a job
    runs) or 'fork' (two forked copies of this process joined through a FileStore: the same
    ranks and collectives, without starting Python and torch again; what the tests use)."""
    from perflab.core.lock import device_lock
    from perflab.core.quietness import watch
    from perflab.workload.models import preset as get_preset

    fault = check_fault(fault)
    steps = positive_int("steps", steps, maximum=50)
    cfg = get_preset(preset)
    path = _trace_path(trace_out, fault)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    # a measurement: its turn on the device, and what else ran meanwhile (in `info`)
    with device_lock(dev, label=f"profiling {cfg.name}") as waited, watch(dev) as w:
        run = _profile_step(cfg, fault, fixed=fixed, steps=steps, batch=batch, seq=seq, path=path, sizes=sizes,
                            record_shapes=record_shapes, profile_memory=profile_memory, with_stack=with_stack,
                            timeout=timeout, threads=threads, launcher=launcher, preset=preset)
    run.info.update(quietness=w.result.to_json(), waited_s=waited)
    return run


def _profile_step(cfg, fault: str, *, fixed: bool, steps: int, batch: int, seq: int, path: Path, sizes: FaultSizes,
                  record_shapes: bool, profile_memory: bool, with_stack: bool, timeout: float, threads: int | None,
                  launcher: str, preset: str) -> ProfileRun:
    if fault == "comm":
        if launcher == "fork":
            return _profile_comm_fork(preset, fixed=fixed, steps=steps, batch=batch, seq=seq, path=path, timeout=timeout)
        if launcher != "torchrun":
            raise InputError(f"launcher must be 'torchrun' or 'fork' (got {launcher!r})")
        return _profile_comm(preset, fixed=fixed, steps=steps, batch=batch, seq=seq, path=path, timeout=timeout)
    before = torch.get_num_threads()
    try:
        if threads:
            torch.set_num_threads(positive_int("threads", threads))
        _, _, loader, step = make_step(cfg, fault, fixed=fixed, batch=batch, seq=seq, sizes=sizes,
                                       device="cuda" if torch.cuda.is_available() else "cpu")
        walls = run_profiled(step, loader, steps=steps, trace_out=path, record_shapes=record_shapes,
                             profile_memory=profile_memory, with_stack=with_stack)
    finally:
        torch.set_num_threads(before)
    return ProfileRun(fault, fixed, str(path), diagnose(path), walls, cfg.name, batch, seq)


def _profile_comm(preset: str, *, fixed: bool, steps: int, batch: int, seq: int, path: Path, timeout: float) -> ProfileRun:
    """Two ranks on gloo through perflab.distributed's launcher; rank 0 exports the trace."""
    from perflab.distributed.torchrun import launch

    args = ["--preset", preset, "--steps", steps, "--batch", batch, "--seq", seq, "--trace-out", str(path.resolve())]
    if fixed:
        args.append("--fixed")
    res = launch("perflab.profiling.comm_worker", nproc=2, args=args, timeout=timeout, backend="gloo",
                 env={"OMP_NUM_THREADS": "1"})
    res.raise_for_status()
    r0 = res.results[0] or {}
    return ProfileRun("comm", fixed, str(path), diagnose(path), list(r0.get("wall_s", [])), preset, batch, seq,
                      {"ranks": 2, "backend": res.backend.name, "launch_s": res.seconds})


def comm_rank(rank: int, world: int, store_path: str, preset: str, fixed: bool, steps: int, batch: int, seq: int,
              trace_out: str | None, timeout: float = 120.0) -> list[float]:
    """One rank of the `comm` fault, joined through a FileStore; the rank given `trace_out` exports its trace."""
    import datetime

    import torch.distributed as dist

    from perflab.workload.models import preset as get_preset

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world,  # pyright: ignore[reportPrivateImportUsage]  # public, documented; absent from __all__
                            timeout=datetime.timedelta(seconds=timeout))
    try:
        _, _, loader, step = make_step(get_preset(preset), "comm", fixed=fixed, batch=batch, seq=seq, world=world)
        out = trace_out or str(Path(store_path).parent / f"rank{rank}.json")
        walls = run_profiled(step, loader, steps=steps, trace_out=out, record_shapes=trace_out is not None)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return walls


def _fork_rank(rank, world, store_path, args, q):
    import os

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        q.put((rank, "ok", comm_rank(rank, world, store_path, *args)))
    except BaseException as e:  # reported to the parent, which raises
        q.put((rank, "error", f"{e.__class__.__name__}: {e}"))
    finally:
        q.close()
        q.join_thread()  # the result must leave before the process does
        os._exit(0)


def _profile_comm_fork(preset: str, *, fixed: bool, steps: int, batch: int, seq: int, path: Path, timeout: float) -> ProfileRun:
    """Two forked ranks on gloo (see profile_step's `launcher`); rank 0 exports the trace."""
    import multiprocessing as mp
    import queue

    from perflab.core.errors import PerflabError

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    run_dir = Path(tempfile.mkdtemp(prefix="perflab-comm-"))
    t0 = time.perf_counter()
    procs = [ctx.Process(target=_fork_rank, args=(r, 2, str(run_dir / "store"),
                                                  (preset, fixed, steps, batch, seq, str(path) if r == 0 else None, timeout), q),
                         daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    results: dict[int, tuple[str, Any]] = {}
    try:
        while len(results) < 2:
            rank, status, value = q.get(timeout=max(timeout - (time.perf_counter() - t0), 1.0))
            results[rank] = (status, value)
    except queue.Empty:
        raise PerflabError(f"the 2-rank comm run did not finish within {timeout:g} s") from None
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
    bad = [f"rank {r}: {v}" for r, (st, v) in sorted(results.items()) if st != "ok"]
    if bad:
        raise PerflabError("the 2-rank comm run failed: " + "; ".join(bad))
    return ProfileRun("comm", fixed, str(path), diagnose(path), list(results[0][1]), preset, batch, seq,
                      {"ranks": 2, "backend": "gloo", "launch_s": time.perf_counter() - t0, "launcher": "fork"})


def check_all(faults=("none", "loader", "sync", "launch"), **kw) -> list[ProfileRun]:
    """Profile each fault and return the runs (tests and the lesson compare top causes)."""
    return [profile_step(fault=f, **kw) for f in faults]

