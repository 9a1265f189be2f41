"""One training step of a model nobody allocated, sharded as a cluster would shard it, under torch's trackers.

    >>> from perflab.plan.step import Layout, run_step
    >>> from perflab.audit.target import from_hf_config
    >>> tr = run_step(lambda: from_hf_config("llama", {...}, batch=1, seq=8192), Layout(gpus=64, fsdp=True, tp=8),
    ...               cluster("h100"))
    >>> tr.parts          # per-GPU bytes at the peak: parameters, gradients, optimizer state, activations, temporaries

How (the way torch's own tests of `torch.distributed._tools` and torchtitan's memory estimation,
`--memory_estimation.enabled`, do it):

1. a *fake* process group (`torch.testing._internal.distributed.fake_pg.FakeStore`, backend "fake") of
   `gpus` ranks, this process being rank 0: collectives return at once and move nothing;
2. the model is built on the `meta` device (shapes only, no bytes), its blocks cut to `depth` when a
   depth is given (`perflab.plan.scale` traces a few blocks and extrapolates), tensor-parallelised
   (`perflab.plan.tp`: Megatron's column/row pairs, with sequence and loss parallelism under `sp`) and
   `fully_shard`ed on a (data, tensor) device mesh, then materialised with `to_empty` inside
   `FakeTensorMode`: every tensor has a shape, a dtype and a device, and no storage;
3. two training steps (forward, backward, AdamW step) run; the first creates the optimizer state, the
   second runs under `FSDPMemTracker` (with `--fsdp`) or `MemTracker`, which books every live tensor by
   kind and reports them at the moment of the peak, once for the forward and backward and once for the
   optimizer's step;
4. the second step also runs under `RuntimeEstimator`, whose per-operator estimate is replaced by
   perflab.plan.cost's roofline for the target GPU; the same hook records each collective the step
   issued, in order, with its bytes and group.

The step runs the kernels a CUDA GPU would where they keep other tensors than a CPU's
(`perflab.plan.kernels`: FlashAttention, a 1-byte dropout mask), a Hugging Face model with its KV cache
off (`use_cache=False`: a training step keeps no cache, and under recompute the cache would grow and
the recomputed attention would read other keys than the forward did), and AdamW with `foreach=True`,
the implementation torch picks on a CUDA GPU (`torch/optim/optimizer.py`, `_default_to_fused_or_foreach`),
whose step holds group-sized temporaries (`torch/optim/adam.py`, `_multi_tensor_adam`: one fp32 tensor
per parameter for sqrt(v)). The CUDA context, NCCL's buffers and the caching allocator's fragmentation
are not tensors and are not counted: `perflab.plan.run` keeps a headroom for them.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from perflab.core.errors import InputError
from perflab.plan.cost import Cluster, Event, Replay, op_seconds, replay
from perflab.plan.target import find_blocks

PARTS = ("parameters", "gradients", "optimizer state", "activations", "temporaries")
# the trackers' kinds (FSDPMemTracker's and MemTracker's names, lower case) -> the plan's parts
_KIND_PART = {"sharded param": "parameters", "unsharded param": "parameters", "parameter": "parameters",
              "buffer": "parameters", "sharded grad": "gradients", "unsharded grad": "gradients",
              "gradient": "gradients", "optstate": "optimizer state", "activation": "activations",
              "inputs": "activations", "input": "activations", "temp": "temporaries",
              "all gather": "temporaries", "reduce scatter": "temporaries"}
DTYPES = ("fp32", "bf16")
AC = ("none", "full", "auto")
FLOP_PHASES = ("forward", "backward", "recompute")


@dataclass(frozen=True)
class Layout:
    """How the job is laid out: `gpus` in all, tensor parallel over `tp` of them (inside a node), with
    sequence and loss parallelism when `sp` (`perflab.plan.tp`), data parallel over the rest (FSDP2 when
    `fsdp`, else each rank keeps a replica as DDP does)."""

    gpus: int
    tp: int = 1
    fsdp: bool = False
    dtype: str = "bf16"
    ac: str = "none"
    sp: bool = False

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
        if self.sp and self.tp == 1:
            raise InputError("--sp splits the sequence over the tensor-parallel ranks: give --tp 2 or more")


@dataclass
class StepTrace:
    """What the trackers saw on rank 0."""

    parts: dict[str, int]  # per-GPU bytes at the peak, by part
    peak_bytes: int
    tracker_kinds: dict[str, int]  # the tracker's own kinds at the peak
    events: list[Event]
    flops: dict[str, float]  # forward, backward (model FLOPs), recompute (hardware only), per GPU
    module_seconds: dict[str, dict[str, float]]  # RuntimeEstimator's per-module forward/backward seconds
    params_total: int  # parameters of the whole model (all ranks together)
    tokens_per_gpu: int | None
    name: str
    blocks: str | None  # the repeated blocks (the FSDP and recompute units)
    notes: list[str] = field(default_factory=list)
    # model FLOPs of attention kernels that ran causal, per phase (counted whole in `flops`)
    causal_flops: dict[str, float] = field(default_factory=lambda: dict.fromkeys(FLOP_PHASES, 0.0))
    n_blocks: int = 0  # the model's blocks (before any cut to a depth)
    depth: int | None = None  # the blocks traced, when fewer than the model's
    # the measured step's peaks by part: while it computes ('step': forward, loss, backward) and while the
    # optimizer steps ('optimizer'); `parts` is the larger of the two
    phases: dict[str, dict[str, int]] = field(default_factory=dict)
    timeline: Replay | None = None  # the events replayed on the streams (`perflab.plan.cost.replay`)
    phase_kinds: dict[str, dict[str, int]] = field(default_factory=dict)  # the tracker's kinds at each phase's peak


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


def canonical(name: str) -> str:
    """The name a GPU's trace gives an operator (`perflab.plan.kernels` runs the CUDA kernels; a CPU
    fallback's `_for_cpu` suffix would not appear on a GPU)."""
    return name.removesuffix("_for_cpu")


def training_config(model: torch.nn.Module) -> None:
    """A Hugging Face model set up as a training step runs it (`perflab.plan.target.training_setup`: no KV
    cache, the causal mask left to the attention kernel)."""
    from perflab.plan.target import training_setup

    training_setup(model)


def cut_blocks(model: torch.nn.Module, depth: int) -> int:
    """Keep the first `depth` of the model's repeated blocks; the number it had."""
    found = find_blocks(model)
    if found is None:
        raise InputError("the model has no repeated blocks (a ModuleList of layers) to trace a few of")
    n = len(found[1])
    if depth < n:
        del found[1][depth:]
    return n


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
    phase (a fused attention backward's recomputed scores as recompute: hardware FLOPs, not the
    model's), causal attention's share, and the collectives in issue order."""

    def __init__(self, c: Cluster, layout: Layout):
        self.c, self.layout = c, layout
        self.events: list[Event] = []
        self.flops: dict[str, float] = dict.fromkeys(FLOP_PHASES, 0.0)
        self.causal: dict[str, float] = dict.fromkeys(FLOP_PHASES, 0.0)
        self.units = 0

    def __call__(self, func, args, kwargs):
        import torch.utils._pytree as pytree
        from torch.distributed.tensor import DTensor
        from torch.utils._runtime_estimation import _IGNORE_OPS, _VIEW_OPS

        from perflab.flops import aten as fa

        kwargs = kwargs or {}
        out = func(*args, **kwargs)
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
        in_backward = torch._C._current_graph_task_id() != -1
        phase = "forward" if not in_backward else ("recompute" if torch.is_grad_enabled() else "backward")
        attention = (packet in fa.SDPA_FWD or packet in fa.SDPA_BWD) and args[1].dim() == 4
        causal = attention and fa.is_causal_kernel(func, args, kwargs)
        booked: dict[str, float] = {}
        if attention and packet in fa.SDPA_BWD:
            backward, again = fa.sdpa_backward_flops(func, args)
            booked = {phase: float(backward), "recompute": float(again)} if phase == "backward" else \
                {phase: float(backward + again)}
        elif attention:
            booked = {phase: float(fa.sdpa_forward_flops(func, args))}
        else:
            try:
                booked = {phase: float(fa.op_flops(func, args, kwargs, out))}
            except Exception:  # an op whose formula does not take these arguments: its bytes still count
                booked = {}
        nbytes = float(sum(_nbytes(t) for t in flat + outs))
        shards = max((_shards(t) for t in flat + outs if isinstance(t, DTensor)), default=1)
        # a DTensor op is booked with its global shapes; each rank computes its share: the global work
        # divided by the mesh dimensions its operands are split (or left partial) over
        booked = {k: v / shards for k, v in booked.items()}
        nbytes /= shards
        flops = sum(booked.values())
        for k, v in booked.items():
            self.flops[k] += v
        if causal:  # the model FLOPs of a causal kernel (its masked half is skipped: FA2 §4.1)
            self.causal[phase] += booked.get(phase, 0.0)
        dtype = next((str(t.dtype) for t in outs if t.is_floating_point()), "torch.float32")
        secs = op_seconds(flops / 2 if causal else flops, nbytes, {"torch.float32": "fp32", "torch.bfloat16": "bf16",
                                                                   "torch.float16": "fp16"}.get(dtype, "fp32"), self.c)
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
        secs = collective_seconds(op, nbytes, n, self.c.busbw_gbps(n, stride), self.c.latency_s(op, n, stride))
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
             recompute: frozenset[str] | None = None, depth: int | None = None) -> StepTrace:
    """Build the target on `meta`, shard it as `layout` says, and run two steps under the trackers.

    `recompute`: the aten operator names to recompute in every block (selective activation
    checkpointing; `layout.ac == 'full'` recomputes the whole block). `depth`: trace only the first
    `depth` of the model's repeated blocks."""
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
            return _run(target, layout, c, recompute, depth)
    except (DataDependentOutputException, DynamicOutputShapeException, UnsupportedOperatorException) as e:
        raise InputError(f"the step cannot run on shapes alone ({type(e).__name__}: {e}): an operator's result "
                         "depends on the tensors' values (.item(), nonzero, data-dependent routing); a model with "
                         "such operators cannot be planned without its data") from None


def _first_batch(target) -> Any:
    from perflab.audit.target import BatchSource

    with torch.device("meta"):
        return BatchSource(target.batches).next()


def _run(target, layout: Layout, c: Cluster, recompute: frozenset[str] | None, depth: int | None) -> StepTrace:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed._tools.runtime_estimator import RuntimeEstimator
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor.parallel import loss_parallel, parallelize_module

    from perflab.audit.target import default_loss, tokens_in
    from perflab.plan.kernels import GpuKernels, run_on_gpu_kernels
    from perflab.plan.tp import tp_plan

    model = target.model
    notes = list(target.notes)
    training_config(model)
    params_total = sum(p.numel() for p in model.parameters())
    found = find_blocks(model)
    n_blocks = len(found[1]) if found else 0
    if depth is not None:
        cut_blocks(model, depth)
    blocks_name = found[0] if found else None
    batch = _first_batch(target)
    tokens = tokens_in(batch, target.tokens_per_batch)
    mesh = init_device_mesh("cpu", (layout.dp, layout.tp), mesh_dim_names=("dp", "tp"))
    dp_mesh, tp_mesh = mesh["dp"], mesh["tp"]  # sliced outside fake mode (slicing reads the mesh's ranks)
    parallel_loss = False
    if layout.tp > 1:
        tp_parts, after, parallel_loss = tp_plan(model, layout.tp, layout.sp)
        for mod, plan in tp_parts:
            parallelize_module(mod, tp_mesh, plan)
        if after:
            after(model)
    for blk in found[1] if found else ():
        run_on_gpu_kernels(blk)
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
    with FakeTensorMode(allow_non_fake_inputs=True), _propagation_apart(), contextlib.redirect_stdout(io.StringIO()), \
            GpuKernels(), warnings.catch_warnings():
        # FSDP2 warns when a block returns a view (a sequence-parallel block's gathered output): the plan
        # runs no in-place op on it
        warnings.filterwarnings("ignore", message="FSDP2-wrapped module")
        model.to_empty(device="cpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=_foreach(model, notes))
        fb = _fake_batch(batch)

        def one_step() -> None:
            with loss_parallel() if parallel_loss else contextlib.nullcontext():
                with torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
                    loss = loss_fn(model, fb)
                loss.backward()

        # the first step creates the optimizer state (and FSDP's lazy state); the trackers watch the second,
        # which starts with every state in place (the tracker books the optimizer's state when it enters)
        one_step()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if layout.fsdp:
            tracker: Any = FSDPMemTracker(model, opt)
            tracker.track_inputs(fb)
        else:
            tracker = MemTracker()
            tracker.track_external(model, opt, fb)
        est = RuntimeEstimator()
        est("operator-level-cost-model")
        est._estimate = rec  # the roofline of the target GPU, not of a GPU in this machine
        snaps: dict[str, Any] = {}
        with tracker, est:
            one_step()
            snaps["step"] = tracker.get_tracker_snapshot("peak")
            _restart_peak(tracker)
            opt.step()
            opt.zero_grad(set_to_none=True)
            snaps["optimizer"] = tracker.get_tracker_snapshot("peak")
        state_bytes = _state_bytes(opt)
    phase_kinds = {k: _kinds(v) for k, v in snaps.items()}
    # the tracker books every tensor made inside optimizer.step as optimizer state, its temporaries too
    # (mem_tracker.py: `_in_opt` -> OPT); the state is what the optimizer keeps, the rest a temporary
    opt_kinds = phase_kinds["optimizer"]
    extra = opt_kinds.get("optstate", 0) - state_bytes
    if extra > 0:
        opt_kinds["optstate"] -= extra
        opt_kinds["temp"] = opt_kinds.get("temp", 0) + extra
    phases = {k: parts_of(v) for k, v in phase_kinds.items()}
    peak_phase = max(phases, key=lambda k: sum(phases[k].values()))
    parts, kinds = phases[peak_phase], phase_kinds[peak_phase]
    mods = {str(k): {"forward": float(v["fw"]) / 1e3, "backward": float(v["bw"]) / 1e3}
            for k, v in est.mod_runtimes.items()}
    per_gpu_tokens = tokens  # each rank's micro-batch; TP ranks share it
    return StepTrace(parts, sum(parts.values()), kinds, rec.events, rec.flops, mods, params_total, per_gpu_tokens,
                     target.name, blocks_name, notes, rec.causal, n_blocks,
                     depth if depth is not None and depth < n_blocks else None, phases, replay(rec.events),
                     phase_kinds)


@contextlib.contextmanager
def _propagation_apart() -> Iterator[None]:
    """Keep DTensor's sharding propagation out of the memory tracker. To learn an operator's output shape,
    DTensor runs it on fake tensors of its *global* shape (torch/distributed/tensor/_sharding_prop.py,
    `_propagate_tensor_meta_non_cached`), inside the fake mode it finds active, which here is the step's
    own, so the tracker would book a whole-vocabulary logits tensor for a moment on a rank that only ever
    holds its shard. The tracker skips operators run in another fake mode (mem_tracker.py, its
    `_fake_mode_on_entry` check, written for this propagation): the propagation is given a fake mode of its
    own, as it makes one when none is active."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    original = ShardingPropagator._propagate_tensor_meta_non_cached

    def apart(self, op_schema):
        with unset_fake_temporarily():
            return original(self, op_schema)

    ShardingPropagator._propagate_tensor_meta_non_cached = apart  # pyright: ignore[reportAttributeAccessIssue]
    try:
        yield
    finally:
        ShardingPropagator._propagate_tensor_meta_non_cached = original  # pyright: ignore[reportAttributeAccessIssue]


def _foreach(model: torch.nn.Module, notes: list[str]) -> bool:
    """AdamW's foreach path, as torch picks it on a CUDA GPU, unless the parameters mix DTensors and plain
    tensors (tensor parallelism without FSDP leaves the embeddings plain): one foreach call cannot take
    both, so the step runs the single-tensor path there."""
    from torch.distributed.tensor import DTensor

    kinds = {isinstance(p, DTensor) for p in model.parameters()}
    if len(kinds) > 1:
        notes.append("AdamW steps tensor by tensor: the parameters mix DTensors and plain tensors, which one "
                     "foreach call cannot take (a GPU's foreach step would hold group-sized temporaries)")
        return False
    return True


def _state_bytes(opt: torch.optim.Optimizer) -> int:
    """The bytes of the optimizer's state on this rank: every tensor it keeps between steps (a DTensor's
    local shard)."""
    from torch.distributed.tensor import DTensor

    total = 0
    for state in opt.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                t = v._local_tensor if isinstance(v, DTensor) else v
                total += t.numel() * t.element_size()
    return total


def _restart_peak(tracker) -> None:
    """Start the tracker's peak afresh from what is live now, as its own `__enter__` does
    (torch/distributed/_tools/mem_tracker.py, `MemTracker.__enter__`): the peak of one phase of the step."""
    tracker._peak_mem_snap = tracker.get_tracker_snapshot()
    tracker._peak_mem = {dev: snap["Total"] for dev, snap in tracker._peak_mem_snap.items()}


def _kinds(snap) -> dict[str, int]:
    raw = next(iter(snap.values())) if snap else {}
    kinds = {str(getattr(k, "value", k)).lower(): int(v) for k, v in raw.items()}
    kinds.pop("total", None)
    return kinds


def parts_of(kinds: dict[str, int]) -> dict[str, int]:
    """The plan's parts from the tracker's kinds."""
    parts: dict[str, int] = dict.fromkeys(PARTS, 0)
    for k, v in kinds.items():
        parts[_KIND_PART.get(k, "temporaries")] += v
    return parts


# torch's tensor factories: their outputs are filled in place by the next op, so a saved one would be a
# mutated cache entry; recomputing them costs nothing
_FACTORIES = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
              "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "arange",
              "scalar_tensor", "lift_fresh", "lift_fresh_copy"}


def _checkpoint_blocks(blocks: torch.nn.ModuleList, recompute: frozenset[str] | None) -> None:
    """Wrap every block in activation checkpointing: the whole block (`recompute=None`), or only the
    operators named in `recompute` (selective: the others' outputs are saved)."""
    from functools import partial

    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    def policy(ctx, func, *args, **kwargs):
        # a saved view keeps its base's storage alive: views are recomputed (they cost nothing), as
        # torch's SAC estimator assumes; so are tensor factories, whose outputs are then filled in place
        name = canonical(func._overloadpacket.__name__)
        if name in (recompute or ()) or getattr(func, "is_view", False) or name in _FACTORIES:
            return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE

    for i, blk in enumerate(list(blocks)):
        if recompute is None:
            blocks[i] = checkpoint_wrapper(blk, preserve_rng_state=False)
        else:
            # a saved output that the forward later changes in place (a router's top-k weights, divided by
            # their sum) is handed back as it is: on fake tensors only its size counts, not its values
            blocks[i] = checkpoint_wrapper(blk, preserve_rng_state=False,
                                           context_fn=partial(create_selective_checkpoint_contexts, policy,
                                                              allow_cache_entry_mutation=True))
