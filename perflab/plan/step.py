"""One training step of a model nobody allocated, sharded as a cluster would shard it, under torch's trackers.

    >>> from perflab.plan.step import Layout, run_step
    >>> from perflab.audit.target import from_hf_config
    >>> tr = run_step(lambda: from_hf_config("llama", {...}, batch=1, seq=8192), Layout(gpus=64, fsdp=True, tp=8),
    ...               cluster("h100"))
    >>> tr.parts          # per-GPU bytes at the peak: parameters, gradients, optimizer state, activations, temporaries

How (the way torch's own tests of `torch.distributed._tools` and torchtitan's `--estimate.memory` do it):

1. a *fake* process group (`torch.testing._internal.distributed.fake_pg.FakeStore`, backend "fake") of
   `gpus` ranks, this process being rank 0: collectives return at once and move nothing;
2. the model is built on the `meta` device (shapes only, no bytes), tensor-parallelised
   (`parallelize_module`, Megatron's column/row pairs) and `fully_shard`ed on a (data, tensor) device
   mesh, then materialised with `to_empty` inside `FakeTensorMode`: every tensor has a shape, a dtype
   and a device, and no storage;
3. two training steps (forward, backward, AdamW step) run under `FSDPMemTracker` (with `--fsdp`) or
   `MemTracker`; the first creates the optimizer state, the second is measured. The tracker books
   every live tensor by kind and reports them at the moment of the peak;
4. the second step also runs under `RuntimeEstimator`, whose per-operator estimate is replaced by
   perflab.plan.cost's roofline for the target GPU; the same hook records each collective the step
   issued, in order, with its bytes and group.

The step runs on CPU tensors: operators whose CPU and CUDA kernels keep different temporaries
(attention's workspace) can differ from a GPU's by those temporaries. The CUDA context, NCCL's buffers
and the caching allocator's fragmentation are not tensors and are not counted: `perflab.plan.run`
keeps a headroom for them.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from perflab.core.errors import InputError
from perflab.plan.cost import Cluster, Event, op_seconds

PARTS = ("parameters", "gradients", "optimizer state", "activations", "temporaries")
# the trackers' kinds (FSDPMemTracker's and MemTracker's names, lower case) -> the plan's parts
_KIND_PART = {"sharded param": "parameters", "unsharded param": "parameters", "parameter": "parameters",
              "buffer": "parameters", "sharded grad": "gradients", "unsharded grad": "gradients",
              "gradient": "gradients", "optstate": "optimizer state", "activation": "activations",
              "inputs": "activations", "input": "activations", "temp": "temporaries",
              "all gather": "temporaries", "reduce scatter": "temporaries"}
DTYPES = ("fp32", "bf16")
AC = ("none", "full", "auto")


@dataclass(frozen=True)
class Layout:
    """How the job is laid out: `gpus` in all, tensor parallel over `tp` of them (inside a node), data
    parallel over the rest (FSDP2 when `fsdp`, else each rank keeps a replica as DDP does)."""

    gpus: int
    tp: int = 1
    fsdp: bool = False
    dtype: str = "bf16"
    ac: str = "none"

    @property
    def dp(self) -> int:
        return self.gpus // self.tp

    def check(self, c: Cluster | None = None) -> None:
        for name, v in (("--gpus", self.gpus), ("--tp", self.tp)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{name} must be a whole number ≥ 1 (got {v!r})")
        if self.gpus % self.tp:
            raise InputError(f"--tp {self.tp} does not divide --gpus {self.gpus}: the data-parallel degree must be whole")
        if c is not None and self.tp > c.gpus_per_node:
            raise InputError(f"--tp {self.tp} spans nodes ({c.gpus_per_node} GPUs per node): tensor parallelism "
                             "all-reduces every layer's activations and belongs inside a node")
        if self.dtype not in DTYPES:
            raise InputError(f"--dtype {self.dtype!r}: use one of {', '.join(DTYPES)}")
        if self.ac not in AC:
            raise InputError(f"--ac {self.ac!r}: use one of {', '.join(AC)}")


@dataclass
class StepTrace:
    """What the trackers saw on rank 0."""

    parts: dict[str, int]  # per-GPU bytes at the peak, by part
    peak_bytes: int
    tracker_kinds: dict[str, int]  # the tracker's own kinds at the peak
    events: list[Event]
    flops: dict[str, float]  # forward, backward, recompute (per GPU)
    module_seconds: dict[str, dict[str, float]]  # RuntimeEstimator's per-module forward/backward seconds
    params_total: int  # parameters of the whole model (all ranks together)
    tokens_per_gpu: int | None
    name: str
    blocks: str | None  # the repeated blocks (the FSDP and recompute units)
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- the fake group


@contextlib.contextmanager
def fake_group(world: int) -> Iterator[None]:
    """A fake process group of `world` ranks for this process (rank 0), destroyed on exit."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise InputError("a process group is already initialised in this process: run the plan outside "
                         "torchrun ranks (it makes its own fake group)")
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- the model


def find_blocks(model: torch.nn.Module) -> tuple[str, torch.nn.ModuleList] | None:
    """The model's repeated blocks: the ModuleList of at least two modules of one type holding the most
    parameters (`blocks`, `layers`, `h`, ...)."""
    best = None
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) >= 2 and len({type(x) for x in m}) == 1:
            n = sum(p.numel() for p in m.parameters())
            if best is None or n > best[0]:
                best = (n, name, m)
    return (best[1], best[2]) if best else None


def _tp_plan(model: torch.nn.Module, tp: int):
    """(module, plan, after) for tensor parallelism: perflab's Transformer (lesson 12's Megatron plan) or
    a Hugging Face model whose config carries `base_model_tp_plan` ('colwise' / 'rowwise' entries)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    cfg = getattr(model, "cfg", None)
    if cfg is not None and hasattr(cfg, "glu") and hasattr(model, "blocks"):
        from perflab.shard.formulas import check_tp
        from perflab.shard.worker import tp_plan

        check_tp(cfg, tp)
        local = cfg.with_(heads=cfg.heads // tp, kv_heads=cfg.n_kv // tp, head_dim=cfg.d_head)

        blocks = model.blocks
        assert isinstance(blocks, torch.nn.ModuleList)

        def after(m):
            for blk in blocks:
                blk.attn.cfg = local  # pyright: ignore[reportAttributeAccessIssue]  # each rank computes heads/t of the heads

        return [(blk, tp_plan(cfg)) for blk in blocks], after
    hf = getattr(model, "config", None)
    raw = getattr(hf, "base_model_tp_plan", None) or {}
    if not raw:
        raise InputError("--tp needs a model with a tensor-parallel plan: perflab's Transformer, or a Hugging Face "
                         "model whose config has base_model_tp_plan (llama, mistral, qwen2, ...)")
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    bad = sorted({v for v in raw.values() if v not in styles})
    if bad:
        raise InputError(f"the model's tensor-parallel plan uses {', '.join(bad)}: perflab plan applies colwise and "
                         "rowwise layers only")
    for key in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(hf, key, None)
        if heads and heads % tp:
            raise InputError(f"--tp {tp} does not divide the model's {key}={heads}")
    base = getattr(model, getattr(model, "base_model_prefix", "model"), model)
    return [(base, {k: styles[v]() for k, v in raw.items()})], None


def _fake_batch(batch: Any) -> Any:
    """The batch with every tensor replaced by one of the same shape and dtype made in the active mode."""
    if isinstance(batch, torch.Tensor):
        return torch.zeros(batch.shape, dtype=batch.dtype)
    if isinstance(batch, dict):
        return {k: _fake_batch(v) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_fake_batch(v) for v in batch) if isinstance(batch, list) else \
            tuple(_fake_batch(v) for v in batch)
    return batch


# ----------------------------------------------------------------------------- the estimate hook

_COLLECTIVES = {"_allgather_base_": ("all_gather", 0, True), "_reduce_scatter_base_": ("reduce_scatter", 1, True),
                "allgather_into_tensor_coalesced_": ("all_gather", 0, True),
                "all_reduce": ("all_reduce", 0, False), "allreduce_": ("all_reduce", 0, False),
                "all_gather_into_tensor": ("all_gather", 0, False), "reduce_scatter_tensor": ("reduce_scatter", 0, False),
                "all_to_all_single": ("all_to_all", 0, False)}


def _nbytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(v) for v in x)
    return 0


class _Recorder:
    """The per-operator estimate given to RuntimeEstimator: roofline time on the cluster's GPU, FLOPs by
    phase, and the collectives in issue order."""

    def __init__(self, c: Cluster, layout: Layout):
        self.c, self.layout = c, layout
        self.events: list[Event] = []
        self.flops = {"forward": 0.0, "backward": 0.0, "recompute": 0.0}
        self.units = 0

    def __call__(self, func, args, kwargs):
        import torch.utils._pytree as pytree
        from torch.distributed.tensor import DTensor
        from torch.utils._runtime_estimation import _IGNORE_OPS, _VIEW_OPS

        from perflab.flops.counter import op_flops

        out = func(*args, **(kwargs or {}))
        packet = func._overloadpacket
        ns = getattr(func, "namespace", "")
        name = packet.__name__
        if ns in ("c10d", "_c10d_functional") and name in _COLLECTIVES:
            self._collective(name, args)
            return out, 0.0
        if packet in _IGNORE_OPS or packet in _VIEW_OPS or ns in ("c10d", "_c10d_functional"):
            return out, 0.0
        flat = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        outs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        try:
            flops = float(op_flops(func, args, kwargs, out))
        except Exception:  # an op whose formula does not take these arguments: its bytes still count
            flops = 0.0
        nbytes = float(sum(_nbytes(t) for t in flat + outs))
        shards = max((_shards(t) for t in flat + outs if isinstance(t, DTensor)), default=1)
        # a DTensor op is booked with its global shapes; each rank computes its share: the global work
        # divided by the mesh dimensions its operands are split (or left partial) over
        flops, nbytes = flops / shards, nbytes / shards
        dtype = next((str(t.dtype) for t in outs if t.is_floating_point()), "torch.float32")
        secs = op_seconds(flops, nbytes, {"torch.float32": "fp32", "torch.bfloat16": "bf16",
                                          "torch.float16": "fp16"}.get(dtype, "fp32"), self.c)
        in_backward = torch._C._current_graph_task_id() != -1
        phase = "forward" if not in_backward else ("recompute" if torch.is_grad_enabled() else "backward")
        self.flops[phase] += flops
        if self.events and self.events[-1].kind == "compute":
            self.events[-1].seconds += secs
        else:
            self.events.append(Event("compute", secs))
        return out, secs * 1e3  # RuntimeEstimator books milliseconds

    def _collective(self, name: str, args) -> None:
        from perflab.plan.cost import collective_seconds

        op, which, overlap = _COLLECTIVES[name]
        lay = self.layout
        if overlap:  # FSDP's: on the data-parallel group, whose ranks are tp apart
            n, stride = lay.dp, lay.tp
        else:
            n, stride = _group_size(args, lay.tp), 1
        nbytes = _nbytes(args[which])
        if op == "all_gather" and not overlap:
            nbytes *= n  # the functional all-gather is given the rank's input; S is the gathered output
        secs = collective_seconds(op, nbytes, n, self.c.busbw_gbps(n, stride))
        if overlap:
            self.units += 1
        self.events.append(Event(op, secs, self.units, overlap, nbytes, n))


def _shards(t) -> int:
    """Into how many pieces a DTensor is split: the product of the mesh dimensions it is not replicated over."""
    n = 1
    for size, placement in zip(t.device_mesh.shape, t.placements, strict=False):
        if not placement.is_replicate():
            n *= int(size)
    return n


def _group_size(args, default: int) -> int:
    from torch.distributed import distributed_c10d

    name = args[-1] if args and isinstance(args[-1], str) else None
    try:
        return distributed_c10d._resolve_process_group(name).size() if name else default  # pyright: ignore[reportPrivateImportUsage]
    except Exception:  # a group this process cannot resolve: the tensor-parallel group
        return default


# ----------------------------------------------------------------------------- the step


def run_step(make_target: Callable[[], Any], layout: Layout, c: Cluster,
             recompute: frozenset[str] | None = None) -> StepTrace:
    """Build the target on `meta`, shard it as `layout` says, and run two steps under the trackers.

    `recompute`: the aten operator names to recompute in every block (selective activation
    checkpointing; `layout.ac == 'full'` recomputes the whole block)."""
    layout.check(c)
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        UnsupportedOperatorException,
    )

    with torch.device("meta"):
        target = make_target()
    try:
        with fake_group(layout.gpus):
            return _run(target, layout, c, recompute)
    except (DataDependentOutputException, DynamicOutputShapeException, UnsupportedOperatorException) as e:
        raise InputError(f"the step cannot run on shapes alone ({type(e).__name__}: {e}): an operator's result "
                         "depends on the tensors' values (.item(), nonzero, data-dependent routing); a model with "
                         "such operators cannot be planned without its data") from None


def _first_batch(target) -> Any:
    from perflab.audit.target import BatchSource

    with torch.device("meta"):
        return BatchSource(target.batches).next()


def _run(target, layout: Layout, c: Cluster, recompute: frozenset[str] | None) -> StepTrace:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed._tools.runtime_estimator import RuntimeEstimator
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    from perflab.audit.target import default_loss, tokens_in

    model = target.model
    notes = list(target.notes)
    params_total = sum(p.numel() for p in model.parameters())
    found = find_blocks(model)
    blocks_name = found[0] if found else None
    batch = _first_batch(target)
    tokens = tokens_in(batch, target.tokens_per_batch)
    mesh = init_device_mesh("cpu", (layout.dp, layout.tp), mesh_dim_names=("dp", "tp"))
    dp_mesh, tp_mesh = mesh["dp"], mesh["tp"]  # sliced outside fake mode (slicing reads the mesh's ranks)
    if layout.tp > 1:
        tp_parts, after = _tp_plan(model, layout.tp)
        for mod, plan in tp_parts:
            parallelize_module(mod, tp_mesh, plan)
        if after:
            after(model)
    if layout.ac != "none" or recompute:
        if not found:
            raise InputError("--ac needs repeated blocks to recompute (a ModuleList of layers): this model has none")
        _checkpoint_blocks(found[1], recompute if layout.ac != "full" else None)
    if layout.fsdp:
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if layout.dtype == "bf16" else MixedPrecisionPolicy()
        if found:
            for blk in found[1]:
                fully_shard(blk, mesh=dp_mesh, mp_policy=mp)
        fully_shard(model, mesh=dp_mesh, mp_policy=mp)
    elif layout.dp > 1:
        notes.append("without --fsdp every rank keeps a full replica (DDP); DDP's gradient buckets are not counted")
    loss_fn = target.loss_fn or default_loss
    autocast = layout.dtype == "bf16" and not layout.fsdp
    rec = _Recorder(c, layout)
    with FakeTensorMode(allow_non_fake_inputs=True):
        model.to_empty(device="cpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        fb = _fake_batch(batch)
        if layout.fsdp:
            tracker: Any = FSDPMemTracker(model, opt)
            tracker.track_inputs(fb)
        else:
            tracker = MemTracker()
            tracker.track_external(model, opt, fb)
        est = RuntimeEstimator()
        est("operator-level-cost-model")
        est._estimate = rec  # the roofline of the target GPU, not of a GPU in this machine
        with tracker, contextlib.redirect_stdout(io.StringIO()):
            for i in range(2):
                if i == 1:
                    tracker.reset_mod_stats()
                with est if i == 1 else contextlib.nullcontext():
                    with torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
                        loss = loss_fn(model, fb)
                    loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
        snap = tracker.get_tracker_snapshot("peak")
    kinds_raw = next(iter(snap.values())) if snap else {}
    kinds = {str(getattr(k, "value", k)).lower(): int(v) for k, v in kinds_raw.items()}
    peak = kinds.pop("total", sum(kinds.values()))
    parts: dict[str, int] = {p: 0 for p in PARTS}
    for k, v in kinds.items():
        parts[_KIND_PART.get(k, "temporaries")] += v
    mods = {str(k): {"forward": float(v["fw"]) / 1e3, "backward": float(v["bw"]) / 1e3}
            for k, v in est.mod_runtimes.items()}
    per_gpu_tokens = tokens  # each rank's micro-batch; TP ranks share it
    return StepTrace(parts, peak, kinds, rec.events, rec.flops, mods, params_total, per_gpu_tokens, target.name,
                     blocks_name, notes)


def _checkpoint_blocks(blocks: torch.nn.ModuleList, recompute: frozenset[str] | None) -> None:
    """Wrap every block in activation checkpointing: the whole block (`recompute=None`), or only the
    operators named in `recompute` (selective: the others' outputs are saved)."""
    from functools import partial

    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    def policy(ctx, func, *args, **kwargs):
        # a saved view keeps its base's storage alive: views are recomputed (they cost nothing), as
        # torch's SAC estimator assumes
        name = func._overloadpacket.__name__
        if name in (recompute or ()) or getattr(func, "is_view", False):
            return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE

    for i, blk in enumerate(list(blocks)):
        if recompute is None:
            blocks[i] = checkpoint_wrapper(blk, preserve_rng_state=False)
        else:
            blocks[i] = checkpoint_wrapper(blk, preserve_rng_state=False,
                                           context_fn=partial(create_selective_checkpoint_contexts, policy))
