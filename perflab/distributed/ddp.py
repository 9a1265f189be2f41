"""DDP in practice, measured inside the ranks of a torchrun job (perflab/distributed/workers/ddp.py).

* `grad_accumulation`: gradient accumulation with and without `no_sync()`: the same update with
  GAS× fewer all-reduces; and LocalSGD (average the *parameters* every H steps instead).
* `comm_hooks`: DDP communication hooks (plain all-reduce, fp16/bf16 compression, PowerSGD):
  bytes all-reduced per step, step time, and how far the gradient is from the exact average.
* `init_memory`: what joining the process group costs: GPU memory on a GPU (NCCL), this
  process's resident host memory on a CPU (gloo). It must run *before* the group exists.
* `roles`: the main process (one per job) and the local-main process (one per node).

Bytes are counted by wrapping `torch.distributed.all_reduce`, which the Python hooks call; the
baseline registers torch's own `allreduce_hook` (what DDP does by default, in Python) so that its
all-reduces are counted the same way.

The experiments run inside the ranks and return what the rank writes to its result file (JSON,
under the experiment's name: perflab/distributed/workers/ddp.py); the tables at the bottom read
those files back, launcher side (`LaunchResult.results`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from perflab.core.jsonable import JSON

HOOKS = ("allreduce", "fp16", "bf16", "powersgd")


@contextlib.contextmanager
def count_all_reduce() -> Iterator[dict[str, int]]:
    """Count calls to torch.distributed.all_reduce and the bytes they carry, while inside the block."""
    import torch.distributed as dist

    counter = {"calls": 0, "bytes": 0}
    original = dist.all_reduce

    def counting(tensor, *args, **kwargs):
        counter["calls"] += 1
        counter["bytes"] += tensor.numel() * tensor.element_size()
        return original(tensor, *args, **kwargs)

    dist.all_reduce = counting
    try:
        yield counter
    finally:
        dist.all_reduce = original


def toy_model(width: int = 512, depth: int = 4, seed: int = 0):
    """An MLP of `depth` width×width layers, identical on every rank (same seed)."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def batch(rank: int, step: int, micro: int, mbs: int, width: int, device):
    """A deterministic micro-batch for (rank, step, micro): regression towards a fixed target."""
    import torch

    g = torch.Generator().manual_seed(1_000_003 * rank + 1009 * step + micro)
    x = torch.randn(mbs, width, generator=g)
    y = x[:, :1] * 0.5 - x[:, 1:2]
    return x.to(device), y.to(device)


def _loss(model, x, y):
    import torch.nn.functional as F

    return F.mse_loss(model(x), y)


def _flat_params(model):
    import torch

    return torch.cat([p.detach().reshape(-1).float().cpu() for p in model.parameters()])


def _grad(p):
    """A parameter's gradient after backward; every parameter of these models takes part in the loss."""
    if p.grad is None:
        raise RuntimeError("a parameter has no gradient after backward: the model has an unused parameter")
    return p.grad


def _ddp(model, ctx, bucket_cap_mb: float):
    from torch.nn.parallel import DistributedDataParallel as DDP

    kw: dict[str, Any] = {"device_ids": [ctx.device.index]} if ctx.device.type == "cuda" else {}
    return DDP(model.to(ctx.device), bucket_cap_mb=bucket_cap_mb, **kw)


def grad_accumulation(ctx, *, gas: int = 4, steps: int = 3, width: int = 512, depth: int = 4, mbs: int = 8,
                      bucket_cap_mb: float = 1.0, local_sgd_every: int = 4) -> JSON:
    """Accumulate `gas` micro-batches per optimizer step, three ways; count the all-reduces.

    * sync every micro-batch: DDP all-reduces after each backward (gas × buckets per step);
    * no_sync: the first gas−1 backwards run inside `ddp.no_sync()`, only the last one
      all-reduces (buckets per step), and the update is the same (a check compares parameters);
    * LocalSGD: no DDP at all; every rank steps on its own gradients and the *parameters* are
      averaged every `local_sgd_every` optimizer steps (one flattened all-reduce) — fewer
      all-reduces still, but a different (approximate) algorithm.
    """
    import gc

    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    out: JSON = {"gas": gas, "steps": steps}
    finals = {}
    for variant in ("sync every micro-batch", "no_sync"):
        model = _ddp(toy_model(width, depth), ctx, bucket_cap_mb)
        model.register_comm_hook(None, default_hooks.allreduce_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        times, calls, nbytes = [], [], []
        for step in range(steps):
            dist.barrier()
            t0 = time.perf_counter()
            with count_all_reduce() as c:
                for micro in range(gas):
                    quiet = variant == "no_sync" and micro < gas - 1
                    with model.no_sync() if quiet else contextlib.nullcontext():
                        x, y = batch(ctx.rank, step, micro, mbs, width, ctx.device)
                        (_loss(model, x, y) / gas).backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
            calls.append(c["calls"])
            nbytes.append(c["bytes"])
        finals[variant] = _flat_params(model.module)
        out[variant] = {"all_reduce_calls_per_step": calls, "bytes_per_step": nbytes, "step_s": times}
        del model, opt
        gc.collect()
    diff = float((finals["no_sync"] - finals["sync every micro-batch"]).abs().max())
    out["max_param_difference"] = diff
    out["same_update"] = diff < 1e-5

    # LocalSGD: plain local training, parameters averaged every `local_sgd_every` optimizer steps
    model = toy_model(width, depth).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    calls, nbytes, times = [], [], []
    for step in range(steps):
        t0 = time.perf_counter()
        with count_all_reduce() as c:
            for micro in range(gas):
                x, y = batch(ctx.rank, step, micro, mbs, width, ctx.device)
                (_loss(model, x, y) / gas).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if (step + 1) % local_sgd_every == 0 or step == steps - 1:
                flat = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
                dist.all_reduce(flat)
                flat /= ctx.world_size
                torch.nn.utils.vector_to_parameters(flat, model.parameters())
        times.append(time.perf_counter() - t0)
        calls.append(c["calls"])
        nbytes.append(c["bytes"])
    out["LocalSGD"] = {"all_reduce_calls_per_step": calls, "bytes_per_step": nbytes, "step_s": times,
                       "every": local_sgd_every}
    out["LocalSGD_vs_sync_difference"] = float((_flat_params(model) - finals["sync every micro-batch"]).abs().max())
    del model, opt
    gc.collect()
    return out


def hook_for(name: str, state_holder: dict):
    """(state, hook) that `register_comm_hook` takes for the hook called `name` (HOOKS); PowerSGD's
    state also goes to `state_holder["state"]`."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    if name == "allreduce":
        return None, default_hooks.allreduce_hook
    if name == "fp16":
        return None, default_hooks.fp16_compress_hook
    if name == "bf16":
        return None, default_hooks.bf16_compress_hook
    if name == "powersgd":
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2,
                                   min_compression_rate=2, use_error_feedback=True, warm_start=True)
        state_holder["state"] = state
        return state, psgd.powerSGD_hook
    raise KeyError(name)


def bf16_compress_equivalent(process_group, bucket):
    """What torch's bf16_compress_hook does (cast to bf16, all-reduce the average, cast back), in Python.

    DDP refuses `bf16_compress_hook` itself unless the backend is NCCL (CUDA 11+, NCCL 2.10+),
    although gloo all-reduces bf16 tensors; this hook is the same compression under another name.
    """
    import torch
    import torch.distributed as dist

    group = process_group if process_group is not None else dist.group.WORLD
    if group is None:
        raise RuntimeError("bf16_compress_equivalent runs inside DDP: no process group is initialised")
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(group.size())
    work = dist.all_reduce(compressed, group=group, async_op=True)
    if work is None:  # pragma: no cover - async_op=True always returns a Work
        raise RuntimeError("all_reduce(async_op=True) returned no Work")
    fut = work.get_future()

    def decompress(f):
        buffer.copy_(f.value()[0])
        return buffer

    return fut.then(decompress)


def comm_hooks(ctx, *, hooks: tuple[str, ...] = HOOKS, steps: int = 6, width: int = 512, depth: int = 4,
               mbs: int = 16, bucket_cap_mb: float = 25.0, probe_step: int = 3,
               choose_hook: Callable[[str, dict], tuple[Any, Any]] = hook_for) -> JSON:
    """Train the same model with each hook; bytes per step, step time, gradient error, final loss.

    At `probe_step` the exact average gradient is computed first (local backward under no_sync,
    then a plain all-reduce of the gradients) and compared with what the hook delivered.
    PowerSGD runs plain all-reduce for its first 2 steps (start_powerSGD_iter=2), then rank-1
    compression with error feedback; its bytes are read after that warm-up. `choose_hook`: (state,
    hook) for a name (`hook_for`; a test passes one DDP refuses).
    """
    import gc

    import torch
    import torch.distributed as dist

    out: JSON = {}
    for name in hooks:
        holder: dict[str, Any] = {}
        model = _ddp(toy_model(width, depth), ctx, bucket_cap_mb)
        state, hook = choose_hook(name, holder)
        note = None
        try:
            model.register_comm_hook(state, hook)
        except TypeError as e:  # bf16_compress_hook needs NCCL: run the same compression as our own hook
            if name != "bf16":
                raise
            note = f"DDP refused bf16_compress_hook on {ctx.backend} ({str(e).strip()}); ran the same compression as a Python hook"
            model.register_comm_hook(None, bf16_compress_equivalent)
        opt = torch.optim.SGD(model.parameters(), lr=0.02)
        times, nbytes, losses = [], [], []
        rel_err = None
        for step in range(steps):
            x, y = batch(ctx.rank, step, 0, mbs, width, ctx.device)
            exact = None
            if step == probe_step:
                with model.no_sync():
                    _loss(model, x, y).backward()
                exact = [_grad(p).detach().clone() for p in model.parameters()]
                for g in exact:
                    dist.all_reduce(g)
                    g /= ctx.world_size
                opt.zero_grad(set_to_none=True)
            dist.barrier()
            t0 = time.perf_counter()
            with count_all_reduce() as c:
                loss = _loss(model, x, y)
                loss.backward()
                if exact is not None:
                    got = torch.cat([_grad(p).reshape(-1) for p in model.parameters()])
                    ref = torch.cat([g.reshape(-1) for g in exact])
                    rel_err = float((got - ref).norm() / ref.norm().clamp_min(1e-30))
                opt.step()
                opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
            nbytes.append(c["bytes"])
            losses.append(float(loss.detach()))
        params = sum(p.numel() for p in model.parameters())
        out[name] = {"bytes_per_step": nbytes, "step_s": times, "loss": losses, "grad_rel_error": rel_err,
                     "params": params, "probe_step": probe_step, "note": note}
        del model, opt, holder
        gc.collect()
    return out


def _rss() -> int | None:
    try:
        import psutil

        return int(psutil.Process(os.getpid()).memory_info().rss)
    except Exception:  # pragma: no cover
        return None


def init_memory(ctx) -> JSON:
    """Memory before and after joining the process group. Call before `init_group(ctx)`; it joins.

    On a GPU (NCCL): device memory in use (total − free, from cudaMemGetInfo), which the handbook
    says grows by ~1–2 GB and is invisible to torch's allocator statistics. On a CPU (gloo): this
    process's resident set size. Stages: before, after init_process_group, after the first
    collective, after destroy_process_group is left to `leave()`.
    """
    import torch
    import torch.distributed as dist

    from perflab.distributed.workers.runtime import init_group

    gpu = ctx.device.type == "cuda"
    stages = []

    def snap(stage: str):
        row: dict[str, Any] = {"stage": stage, "rss_bytes": _rss()}
        if gpu:
            torch.cuda.synchronize(ctx.device)
            free, total = torch.cuda.mem_get_info(ctx.device)
            row.update(gpu_used_bytes=int(total - free), torch_allocated_bytes=int(torch.cuda.memory_allocated(ctx.device)),
                       torch_reserved_bytes=int(torch.cuda.memory_reserved(ctx.device)))
        stages.append(row)

    if gpu:
        torch.ones(1, device=ctx.device)  # the CUDA context and the kernels it needs
    snap("before init_process_group" + (" (CUDA context up)" if gpu else ""))
    init_group(ctx)
    snap("after init_process_group")
    t = torch.ones(1024, device=ctx.device)
    if gpu:
        dist.barrier(device_ids=[ctx.device.index])
    else:
        dist.barrier()
    dist.all_reduce(t)
    snap("after the first barrier and all_reduce")
    return {"kind": "cuda" if gpu else "cpu", "backend": ctx.backend, "stages": stages,
            "gpu_skipped_reason": None if gpu else
            "no GPU in this job: NCCL's device-memory cost can only be measured on a GPU; "
            "this rank's host memory (RSS) is measured instead"}


def roles(ctx) -> JSON:
    """Main vs local-main: who prepares node-local data, who writes the checkpoint."""
    import socket

    import torch.distributed as dist

    did = []
    node_dir = (ctx.run_dir / f"node{ctx.node}") if ctx.run_dir else None
    if ctx.is_local_main and node_dir is not None:
        node_dir.mkdir(exist_ok=True)
        (node_dir / "dataset.txt").write_text(f"prepared by pid {os.getpid()} (rank {ctx.rank})\n")
        did.append("prepared this node's dataset cache")
    dist.barrier()  # everyone waits until their node's copy exists
    prepared_by = (node_dir / "dataset.txt").read_text().strip() if node_dir is not None else None
    if ctx.is_main:
        did.append("wrote the checkpoint and the logs")
    return {"rank": ctx.rank, "local_rank": ctx.local_rank, "node": ctx.node, "world_size": ctx.world_size,
            "local_world_size": ctx.local_world_size, "is_main": ctx.is_main, "is_local_main": ctx.is_local_main,
            "host": socket.gethostname(), "pid": os.getpid(), "did": did, "dataset_cache": prepared_by}


# ----------------------------------------------------------------------------- summaries (launcher side)
def accumulation_table(results: list[dict[str, Any]]):
    """Rank 0's view of the three ways to accumulate: all-reduces and bytes per optimizer step."""
    import pandas as pd

    r = results[0]["grad_accumulation"]
    rows = []
    for variant in ("sync every micro-batch", "no_sync", "LocalSGD"):
        v = r[variant]
        # DDP re-buckets after its first iteration: count calls from the second step on
        calls = v["all_reduce_calls_per_step"][1:] or v["all_reduce_calls_per_step"]
        times = sorted(v["step_s"])
        rows.append({"variant": variant, "all-reduce calls per step": sum(calls) / len(calls),
                     "MB all-reduced per step": sum(v["bytes_per_step"]) / len(v["bytes_per_step"]) / 1e6,
                     "median step (ms)": times[len(times) // 2] * 1e3})
    return pd.DataFrame(rows).set_index("variant")


def hooks_table(results: list[dict[str, Any]]):
    """Rank 0's view of each hook: bytes per step after warm-up, relative to fp32, step time, gradient error."""
    import pandas as pd

    r = results[0]["comm_hooks"]
    base = None
    rows = []
    for name, v in r.items():
        after = v["bytes_per_step"][v["probe_step"]:]  # after PowerSGD's warm-up; same window for all
        b = sum(after) / len(after)
        if name == "allreduce":
            base = b
        times = sorted(v["step_s"][v["probe_step"]:])
        rows.append({"hook": name, "MB per step": b / 1e6, "median step (ms)": times[len(times) // 2] * 1e3,
                     "gradient rel. error": v["grad_rel_error"], "final loss": v["loss"][-1],
                     "note": v.get("note") or ""})
    df = pd.DataFrame(rows).set_index("hook")
    if base:
        df.insert(1, "bytes vs fp32 all-reduce", df["MB per step"] * 1e6 / base)
    return df


def memory_table(results: list[dict[str, Any]]):
    """Per rank and stage: host RSS (and GPU memory in use on a GPU), in MiB."""
    import pandas as pd

    rows = []
    for rank, r in enumerate(results):
        m = r["init_memory"]
        for s in m["stages"]:
            row = {"rank": rank, "stage": s["stage"], "host RSS (MiB)": s["rss_bytes"] / 2**20 if s["rss_bytes"] else None}
            if "gpu_used_bytes" in s:
                row["GPU in use (MiB)"] = s["gpu_used_bytes"] / 2**20
                row["torch reserved (MiB)"] = s["torch_reserved_bytes"] / 2**20
            rows.append(row)
    return pd.DataFrame(rows)


def roles_table(results: list[dict[str, Any]]):
    import pandas as pd

    return pd.DataFrame([{k: r["roles"][k] for k in ("rank", "node", "local_rank", "is_main", "is_local_main")}
                         | {"did": "; ".join(r["roles"]["did"]) or "-", "dataset cache": r["roles"]["dataset_cache"]}
                         for r in results]).set_index("rank")


# ----------------------------------------------------------------------------- lesson 06, section 8 (launcher side)
def _fmt(frame, digits: int = 3):
    """`frame` with every float as text to `digits` significant digits (perflab.core.readout.num)."""
    from perflab.core.readout import num

    out = frame.copy().astype(object)
    for col in out.columns:
        out[col] = [num(v, digits) if isinstance(v, float) else v for v in frame[col]]
    return out


class Practice:
    """Section 8's torchrun job, read for a person: two simulated nodes, DDP on gloo, four experiments."""

    def __init__(self, launch: Any):
        self.launch = launch  # perflab.distributed.outcome.LaunchResult

    @property
    def results(self) -> list[Any]:
        return self.launch.results

    @property
    def message(self) -> str:
        return self.launch.message if self.launch.ok else self.launch.report()

    def roles_table(self):
        return roles_table(self.results)

    def memory_table(self):
        return _fmt(memory_table(self.results), 4)

    @property
    def gpu_skipped_reason(self) -> str:
        return str(self.results[0]["init_memory"].get("gpu_skipped_reason") or "")

    def accumulation_line(self) -> str:
        from perflab.core.readout import num

        acc = self.results[0]["grad_accumulation"]
        same = "the same parameters as" if acc["same_update"] else "NOT the same parameters as"
        return (f"GAS = {acc['gas']}: no_sync gives {same} syncing every micro-batch (largest difference "
                f"{num(acc['max_param_difference'], 2)}); LocalSGD drifts by {num(acc['LocalSGD_vs_sync_difference'], 2)}")

    def accumulation_table(self):
        return _fmt(accumulation_table(self.results))

    def hook_notes(self) -> str:
        notes = [n for n in hooks_table(self.results)["note"] if n]
        return "\n".join(notes)

    def hooks_table(self):
        return _fmt(hooks_table(self.results).drop(columns="note"))

    def no_sync_ratio(self) -> float:
        """Bytes all-reduced per optimizer step with no_sync ÷ syncing every micro-batch."""
        t = accumulation_table(self.results)
        return float(t.loc["no_sync", "MB all-reduced per step"] / t.loc["sync every micro-batch", "MB all-reduced per step"])

    def powersgd_ratio(self) -> float:
        """PowerSGD's bytes per step ÷ the plain fp32 all-reduce's."""
        return float(hooks_table(self.results).loc["powersgd", "bytes vs fp32 all-reduce"])


def run_practice(per_node: int, *, width: int, steps: int, hook_steps: int, timeout: float) -> Practice:
    """Launch perflab.distributed.workers.ddp as two simulated nodes of `per_node` ranks each, on gloo."""
    from perflab.distributed.torchrun import launch

    res = launch("perflab.distributed.workers.ddp", per_node, ["--width", str(width), "--steps", str(steps),
                                                               "--hook-steps", str(hook_steps)],
                 nnodes=2, timeout=timeout, backend="gloo")
    return Practice(res)


class GpuJoinCost:
    """What joining an NCCL group costs in GPU memory, measured on `nproc` GPUs, or why it was not."""

    def __init__(self, launch: Any | None, reason: str = ""):
        self.launch, self.reason = launch, reason

    def text(self) -> str:
        if self.launch is None:
            return f"GPU memory of init_process_group: not measured — {self.reason}"
        if not self.launch.ok:
            return f"GPU memory of init_process_group: the job failed\n{self.launch.report()}"
        return f"GPU memory of init_process_group, {self.launch.world_size} ranks on NCCL:"

    def table(self):
        if self.launch is None or not self.launch.ok:
            return None
        return _fmt(memory_table(self.launch.results), 4)


def gpu_join_cost(nproc: int, backend: str, timeout: float, why_not: str) -> GpuJoinCost:
    """Measure the memory of joining on NCCL ranks (one GPU each); on gloo say `why_not` instead."""
    if backend != "nccl":
        return GpuJoinCost(None, why_not)
    from perflab.distributed.torchrun import launch

    return GpuJoinCost(launch("perflab.distributed.workers.ddp", nproc, ["--experiments", "init_memory"], timeout=timeout,
                              backend="nccl"))
