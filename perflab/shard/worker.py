"""One rank of `perflab shard`: FSDP2, DTensor tensor parallelism or a pipeline, measured.

    torchrun --nproc-per-node 2 -m perflab.shard.worker --strategy fsdp [--preset tiny-gpt]

Launched by `perflab.shard.run.shard` through `perflab.distributed.torchrun.launch`; each rank writes
its report (see the `fsdp`, `tp` and `pp` functions) to its result file, JSON, which the launcher
turns into one row per rank.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from perflab.core.jsonable import JSON

if TYPE_CHECKING:
    from torch.distributed.tensor.parallel import ParallelStyle

# ----------------------------------------------------------------------------- counting collectives
# FSDP2 calls the single-tensor collectives by these names through `torch.distributed`: torch 2.13
# renamed all_gather_into_tensor and reduce_scatter_tensor to the *_single names (the old ones stay as
# deprecated aliases); torch 2.11 and 2.12 have the old names only, and their FSDP2 calls those
FSDP_COLLECTIVES = {"all_gather": ("all_gather_single", "all_gather_into_tensor"),
                    "reduce_scatter": ("reduce_scatter_single", "reduce_scatter_tensor")}


@contextlib.contextmanager
def count_fsdp_collectives() -> Iterator[dict[str, dict[str, int]]]:
    """Count FSDP2's all-gathers and reduce-scatters (calls, and bytes of the full buffer).

    FSDP2 calls `torch.distributed.all_gather_single(output, input)` and
    `reduce_scatter_single(output=, input=)` through the module (`all_gather_into_tensor` and
    `reduce_scatter_tensor` before torch 2.13), so wrapping whichever of these names the installed
    torch has sees every call. A call through one name counts once: the deprecated alias reaches
    the new function inside torch, not through the wrapped module attribute.
    """
    import torch.distributed as dist

    counts = {"all_gather": {"calls": 0, "bytes": 0}, "reduce_scatter": {"calls": 0, "bytes": 0}}
    originals = {name: getattr(dist, name) for names in FSDP_COLLECTIVES.values() for name in names
                 if hasattr(dist, name)}

    def wrap(kind: str, fn):
        # all-gather: the bytes of the output (the full buffer); reduce-scatter: of the input
        key, pos = ("output_tensor", 0) if kind == "all_gather" else ("input", 1)

        def counted(*args, **kwargs):
            t = kwargs[key] if key in kwargs else args[pos]
            counts[kind]["calls"] += 1
            counts[kind]["bytes"] += t.numel() * t.element_size()
            return fn(*args, **kwargs)
        return counted

    for kind, names in FSDP_COLLECTIVES.items():
        for name in names:
            if name in originals:
                setattr(dist, name, wrap(kind, originals[name]))
    try:
        yield counts
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)


def functional_collective_counter():
    """A TorchDispatchMode that counts DTensor's collectives (torch.ops._c10d_functional.*):
    {op: {"calls", "bytes"}} with the bytes of each call's input."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.counts: dict[str, dict[str, int]] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func.overloadpacket)
            op = name.split(".")[-1]
            if "_c10d_functional" in name and op != "wait_tensor" and not op.startswith("_"):
                c = self.counts.setdefault(op, {"calls": 0, "bytes": 0})
                c["calls"] += 1
                t = args[0]
                if isinstance(t, (list, tuple)):
                    c["bytes"] += sum(x.numel() * x.element_size() for x in t)
                else:
                    c["bytes"] += t.numel() * t.element_size()
            return func(*args, **(kwargs or {}))

    return Counter()


def _local_bytes(t) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


# ----------------------------------------------------------------------------- FSDP
def fsdp(ctx, preset: str = "tiny-gpt", batch: int = 2, seq: int = 32, steps: int = 2, lr: float = 1e-3) -> JSON:
    """fully_shard every block, then the root; train `steps` AdamW steps on this rank's batch.

    Reports the bytes of this rank's parameter, gradient and optimizer-state shards, the peak of the
    last step (torch's FSDPMemTracker: every live tensor by kind, at the moment of the peak; on CUDA
    also torch.cuda.max_memory_allocated), the collectives of the last step, and the loss averaged
    over ranks at every step. Rank 0 also trains the unsharded model on the ranks' batches together
    (the 1-rank run) and reports its losses.
    """
    import torch
    import torch.distributed as dist
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from perflab.workload.models import build_model
    from perflab.workload.models import preset as get_preset
    from perflab.workload.train import make_batches, model_loss

    cfg = get_preset(preset)
    n = ctx.world_size
    batches = make_batches(cfg, batch, seq, n=n, seed=0, device=ctx.device)
    mesh = init_device_mesh(ctx.device.type, (n,))
    ctx.step("fully_shard")
    model = build_model(cfg, device=ctx.device)
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    tracker = FSDPMemTracker(model, opt)
    tracker.track_inputs(batches[ctx.rank])
    losses, grad_bytes, counts, step_s = [], 0, {}, 0.0
    if ctx.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(ctx.device)
    with tracker:
        for step in range(steps):
            ctx.step(f"train step {step}")
            last = step == steps - 1
            if last:
                tracker.reset_mod_stats()
                if ctx.device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(ctx.device)
            t0 = time.perf_counter()
            with count_fsdp_collectives() as c:
                loss = model_loss(model, batches[ctx.rank])
                loss.backward()
                if last:
                    grad_bytes = sum(_local_bytes(p.grad) for p in model.parameters() if p.grad is not None)
                opt.step()
                opt.zero_grad(set_to_none=True)
            step_s = time.perf_counter() - t0
            counts = c
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append(float(mean) / n)
    snap = tracker.get_tracker_snapshot("peak")
    dev_snap = next(iter(snap.values())) if snap else {}
    parts = {str(k).split(".")[-1].lower(): int(v) for k, v in dev_snap.items()}
    peak = parts.pop("total", 0)
    param_bytes = sum(_local_bytes(p) for p in model.parameters())
    optim_bytes = sum(_local_bytes(v) for st in opt.state.values() for v in st.values() if torch.is_tensor(v))
    out: JSON = {"rank": ctx.rank, "param_bytes": param_bytes, "grad_bytes": grad_bytes,
                 "optim_bytes": optim_bytes, "peak_bytes": peak, "peak_parts": parts,
                 "comm": counts, "losses": losses, "step_s": step_s, "device": str(ctx.device)}
    if ctx.device.type == "cuda":
        out["cuda_max_allocated"] = int(torch.cuda.max_memory_allocated(ctx.device))
    del tracker, opt, model
    if ctx.rank == 0:
        ctx.step("1-rank reference")
        out["reference_losses"] = reference_losses(cfg, batches, steps, lr, ctx.device)
    return out


def reference_losses(cfg, batches, steps: int, lr: float, device) -> list[float]:
    """The same training on one process: the loss is the mean over the ranks' batches."""
    import torch

    from perflab.workload.models import build_model
    from perflab.workload.train import model_loss

    model = build_model(cfg, device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    out = []
    for _ in range(steps):
        loss = sum(model_loss(model, b) for b in batches) / len(batches)
        loss.backward()  # type: ignore[union-attr]  # a sum of tensors is a tensor
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.append(float(loss))
    return out


# ----------------------------------------------------------------------------- tensor parallelism
def tp_plan(cfg) -> dict[str, ParallelStyle]:
    """Megatron's pairs in one block: q, k, v (and the MLP's up/gate) column-parallel, the attention
    output and the MLP's down projection row-parallel.

    The attention's and the MLP's inputs are made replicated DTensors once, at the module
    (`PrepareModuleInput`), so that the input gradients of q, k and v (and of up and gate) are
    summed as partial DTensors and all-reduced once per module in the backward, as Megatron's fused
    QKV layer does. Without it each column-parallel layer would all-reduce its own input gradient
    (q, k and v: three all-reduces where Megatron has one)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
    )

    plan: dict[str, ParallelStyle] = {
        "attn": PrepareModuleInput(input_layouts=(Replicate(), None), desired_input_layouts=(Replicate(), None)),
        "mlp": PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),)),
        "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
        "attn.o": RowwiseParallel(), "mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel()}
    if cfg.glu:
        plan["mlp.gate"] = ColwiseParallel()
    return plan


def tp(ctx, preset: str = "tiny-gpt", batch: int = 2, seq: int = 32) -> JSON:
    """Run the model's blocks unsharded and tensor-parallel on the same input, forward and backward
    (the loss is the sum of the last block's output); count the collectives of each block's forward
    and of each block's backward, and compare the outputs and the input gradients."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    from perflab.workload.models import build_model
    from perflab.workload.models import preset as get_preset

    cfg = get_preset(preset)
    n = ctx.world_size
    model = build_model(cfg, device=ctx.device)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, seq, cfg.hidden, generator=g).to(ctx.device)
    rope = None
    if cfg.positions == "rotary":
        rope = (model.rope_cos[:seq], model.rope_sin[:seq])  # type: ignore[index]  # buffers of a rotary model
    ctx.step("unsharded forward and backward")
    xr = x.clone().requires_grad_(True)
    ref = xr
    for blk in model.blocks:
        ref = blk(ref, rope)
    ref.sum().backward()
    ref_grad = xr.grad.detach().clone()  # type: ignore[union-attr]  # xr requires grad
    ref = ref.detach()
    model.zero_grad(set_to_none=True)
    mesh = init_device_mesh(ctx.device.type, (n,))
    local_cfg = cfg.with_(heads=cfg.heads // n, kv_heads=cfg.n_kv // n, head_dim=cfg.d_head)
    for blk in model.blocks:
        parallelize_module(blk, mesh, tp_plan(cfg))
        blk.attn.cfg = local_cfg  # type: ignore[union-attr]  # each rank computes heads/n heads
    param_bytes = sum(_local_bytes(p) for blk in model.blocks for p in blk.parameters())
    per_block: list[dict[str, dict[str, int]]] = []
    per_block_bwd: list[dict[str, dict[str, int]]] = [{} for _ in model.blocks]
    bwd_counter = functional_collective_counter()

    def into(i):
        def hook(module, grad_output):
            bwd_counter.counts = per_block_bwd[i]  # what runs from here on is block i's backward
        return hook

    # registered before the forward: full backward hooks wrap the block's outputs as it runs
    hooks = [blk.register_full_backward_pre_hook(into(i)) for i, blk in enumerate(model.blocks)]
    ctx.step("tensor-parallel forward")
    xt = x.clone().requires_grad_(True)
    y = xt
    t0 = time.perf_counter()
    for blk in model.blocks:
        counter = functional_collective_counter()
        with counter:
            y = blk(y, rope)
        per_block.append(counter.counts)
    seconds = time.perf_counter() - t0
    ctx.step("tensor-parallel backward")
    t0 = time.perf_counter()
    with bwd_counter:
        y.sum().backward()
    backward_s = time.perf_counter() - t0
    for h in hooks:
        h.remove()
    calls = sum(c["calls"] for b in per_block for c in b.values())
    nbytes = sum(c["bytes"] for b in per_block for c in b.values())
    bcalls = sum(c["calls"] for b in per_block_bwd for c in b.values())
    bbytes = sum(c["bytes"] for b in per_block_bwd for c in b.values())
    diff = float((y.detach() - ref).abs().max())
    gdiff = float((xt.grad - ref_grad).abs().max())  # type: ignore[operator]  # xt requires grad
    model.zero_grad(set_to_none=True)
    peak, peak_parts = tp_step_peak(ctx, model, cfg, batch, seq)
    return {"rank": ctx.rank, "param_bytes": param_bytes, "peak_bytes": peak, "peak_parts": peak_parts, "per_block": per_block, "per_block_backward": per_block_bwd,
            "forward_calls": calls, "forward_bytes": nbytes, "backward_calls": bcalls, "backward_bytes": bbytes,
            "comm_calls": calls + bcalls, "comm_bytes": nbytes + bbytes, "max_abs_diff": diff,
            "ref_max_abs": float(ref.abs().max()), "grad_max_abs_diff": gdiff,
            "ref_grad_max_abs": float(ref_grad.abs().max()), "forward_s": seconds, "backward_s": backward_s}


def tp_step_peak(ctx, model, cfg, batch: int, seq: int, steps: int = 2) -> tuple[int, dict[str, int]]:
    """The whole model, its blocks tensor-parallel, trained `steps` AdamW steps on one batch (the same on
    every rank: tensor-parallel ranks share their input): the peak of the last step and its parts by kind,
    as torch's MemTracker saw this rank's tensors (the FSDP check's tracker, without FSDP)."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker

    from perflab.workload.train import make_batches, model_loss

    ctx.step("tensor-parallel training step")
    data = make_batches(cfg, batch, seq, n=1, seed=0, device=ctx.device)[0]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tracker = MemTracker()
    tracker.track_external(model, opt, *data)
    with tracker:
        for step in range(steps):
            if step == steps - 1:
                tracker.reset_mod_stats()
            model_loss(model, data).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    snap = tracker.get_tracker_snapshot("peak")
    dev_snap = next(iter(snap.values())) if snap else {}
    parts = {str(getattr(k, "value", k)).split(".")[-1].lower(): int(v) for k, v in dev_snap.items()}
    return parts.pop("total", 0), parts


# ----------------------------------------------------------------------------- pipeline
def pp_stage_module(width: int, hold: dict[str, float], seed: int):
    """A stage: a linear layer and a tanh, plus a fixed wait in forward and in backward.

    `hold` maps "forward" and "backward" to the seconds of each wait (changed between steps). The
    waits stand for compute that takes the same time whatever the other stages do, as kernels
    on separate GPUs do; on a shared CPU, ranks that compute at once slow each other down and the
    measured bubble would mix the schedule with that contention.
    """
    import torch
    from torch import nn

    class Hold(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[override]
            time.sleep(hold["forward"])
            return x.clone()

        @staticmethod
        def backward(ctx, grad):  # type: ignore[override]
            t0 = time.perf_counter()
            time.sleep(hold["backward"])
            stage.busy_s += time.perf_counter() - t0
            stage.in_flight -= 1
            stage.events.append(("B", t0, time.perf_counter()))
            return grad

    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(seed)
            self.lin = nn.Linear(width, width)
            with torch.no_grad():
                self.lin.weight.copy_(torch.randn(width, width, generator=g) / width**0.5)
            self.busy_s = 0.0
            self.in_flight = 0
            self.max_in_flight = 0
            self.saved_bytes = 0
            self.events: list = []

        def forward(self, x):
            t0 = time.perf_counter()
            params = {p.untyped_storage().data_ptr() for p in self.parameters()}
            saved = [0]

            def pack(t):
                if t.untyped_storage().data_ptr() not in params:
                    saved[0] += t.numel() * t.element_size()
                return t

            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                y = Hold.apply(torch.tanh(self.lin(x)))
            self.saved_bytes = saved[0]
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.busy_s += time.perf_counter() - t0
            self.events.append(("F", t0, time.perf_counter()))
            return y

    stage = Stage()
    return stage


def pp(ctx, microbatches: list[int], schedule: str = "gpipe", width: int = 64, rows: int = 4,
       forward_ms: float = 100.0, backward_ms: float = 200.0) -> JSON:
    """Run one pipeline training step per micro-batch count (after one warm-up step each) and
    report this stage's busy and idle time, and the micro-batches whose activations it held at once."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    p, r = ctx.world_size, ctx.rank
    runs = []
    for m in microbatches:
        ctx.step(f"{schedule} m={m}")
        hold = {"forward": 0.0, "backward": 0.0}  # the warm-up step (shapes are exchanged) holds nothing
        mod = pp_stage_module(width, hold, seed=r).to(ctx.device)
        stage = PipelineStage(mod, r, p, ctx.device)
        cls = ScheduleGPipe if schedule == "gpipe" else Schedule1F1B
        sched = cls(stage, n_microbatches=m, loss_fn=lambda out, target: F.mse_loss(out, target))
        g = torch.Generator().manual_seed(m)
        x = torch.randn(m * rows, width, generator=g).to(ctx.device)
        y = torch.randn(m * rows, width, generator=g).to(ctx.device)
        result = {}
        for attempt in ("warm-up", "measured"):
            if attempt == "measured":
                hold.update(forward=forward_ms / 1e3, backward=backward_ms / 1e3)
            mod.busy_s, mod.max_in_flight, mod.in_flight, mod.events = 0.0, 0, 0, []
            dist.barrier()
            t0 = time.perf_counter()
            losses: list[Any] = []
            if r == 0:
                sched.step(x)
            elif r == p - 1:
                sched.step(target=y, losses=losses)
            else:
                sched.step()
            dist.barrier()
            wall = time.perf_counter() - t0
            mod.zero_grad(set_to_none=True)
            result = {"m": m, "wall_s": wall, "busy_s": mod.busy_s, "idle_s": wall - mod.busy_s,
                      "bubble": (wall - mod.busy_s) / wall, "max_in_flight": mod.max_in_flight,
                      "activation_bytes_per_microbatch": mod.saved_bytes,
                      "activation_bytes_held": mod.max_in_flight * mod.saved_bytes,
                      "events": [(k, a - t0, b - t0) for k, a, b in mod.events], "t0": t0}
        runs.append(result)
        del sched, stage, mod
    return {"rank": r, "schedule": schedule, "runs": runs}


# ----------------------------------------------------------------------------- entry
def body(ctx, a) -> JSON:
    if "," in a.strategy:  # several strategies, one after the other, in the same ranks (one launch)
        out = {}
        for strategy in a.strategy.split(","):
            a.strategy = strategy
            out[strategy] = body(ctx, a)
        return out
    if a.strategy == "fsdp":
        return fsdp(ctx, a.preset, a.batch, a.seq, a.steps)
    if a.strategy == "tp":
        return tp(ctx, a.preset, a.batch, a.seq)
    ms = [int(v) for v in str(a.microbatches).split(",")]
    return pp(ctx, ms, a.schedule, forward_ms=a.forward_ms, backward_ms=a.backward_ms)


def arguments(p) -> None:
    p.add_argument("--strategy", default="fsdp", help="fsdp, tp, pp, or several separated by commas")
    p.add_argument("--preset", default="tiny-gpt")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--microbatches", default="4", help="comma-separated micro-batch counts (pp)")
    p.add_argument("--schedule", default="gpipe")
    p.add_argument("--forward-ms", type=float, default=100.0)
    p.add_argument("--backward-ms", type=float, default=200.0)


def main(argv: list[str] | None = None) -> None:
    from perflab.distributed.workers import runtime

    runtime.main("perflab.shard.worker", arguments, body, argv)


if __name__ == "__main__":
    main()
