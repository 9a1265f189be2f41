"""What sharding should cost on each rank, before anything runs.

* FSDP (ZeRO-3, `fully_shard` on every block and on the root): lesson 03's estimate
  (`perflab.memory.estimate.model_state_bytes(..., zero=3, dp=n)`: weights, gradients and AdamW's
  two moments, each divided by n), then the bytes it does not model, each named:
  - **uneven dim-0 shards**: FSDP2 splits every parameter along its first dimension with
    `torch.chunk`, so rank r holds ceil(d0/n) rows (or fewer, or none, at the end), not exactly 1/n;
  - **AdamW's step counters**: one fp32 scalar `step` per parameter tensor, on every rank.
* FSDP's peak (`fsdp_peak_unsharded`): beyond the shards, about two units of unsharded parameters
  (the unit computing and the next one, whose all-gather FSDP2 prefetches; the root unit stays
  unsharded from its forward to its backward) and, in the backward, one unit's unsharded gradients.
* FSDP's collectives per training step: every unit's parameters are all-gathered before its forward
  and, because blocks reshard after forward, again before their backward; the root unit (embedding,
  final norm) does not reshard after forward (torch's default for the root), so it is gathered
  once. Every unit's gradients are reduce-scattered once. Bytes are those of the full (padded)
  buffer each collective assembles or reduces: n × the padded shard.
* Tensor parallelism (Megatron's column- then row-parallel pairs; Shoeybi et al. 2019, "Megatron-LM",
  arXiv:1909.08053, §3 and fig. 4): in the forward, one all-reduce of the block's b·s·h activations
  after each row-parallel layer (attention output, MLP down projection); in the backward, one
  all-reduce of the same size for the input gradient of each column-parallel layer (q/k/v, the MLP's
  up/gate), whose input was replicated: 2 + 2 = 4 per transformer block per training step.
  Sequence parallelism (Korthikanti et al. 2022, arXiv:2205.05198, section "Sequence Parallelism")
  shards the norms' and dropouts' activations along the sequence and swaps each all-reduce for a
  reduce-scatter and an all-gather of the same tensor (an all-gather before each column-parallel
  layer and a reduce-scatter after each row-parallel one in the forward, the reverse in the
  backward): 4 + 4 per block per step, the same bytes on a ring.
* Pipeline bubble, p stages of equal time, m micro-batches. GPipe and 1F1B both take (m + p − 1)
  slots of one micro-batch's forward and backward, of which each stage works m (Huang et al. 2019,
  GPipe, arXiv:1811.06965, §2.2). Two conventions, both in use:
  - idle over the whole step: (p − 1)/(m + p − 1) (`bubble_fraction`);
  - idle over the ideal (busy) time: (p − 1)/m, which Megatron-LM's paper calls the "bubble time
    fraction" (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
    Clusters Using Megatron-LM", SC'21, arXiv:2104.04473, §2.2.1) (`bubble_ratio`).
  With b the second and f the first, f = b/(1 + b) and b = f/(1 − f).
  Interleaved 1F1B (same paper, §2.2.2) gives each device v model chunks: the bubble over ideal
  time becomes (p − 1)/(v·m), and every micro-batch now crosses v·p − 1 chunk boundaries instead of
  p − 1 each way, about v× the point-to-point sends (`p2p_sends`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from perflab.core.errors import InputError
from perflab.core.validate import positive_int

FP32 = 4


def bubble_fraction(p: int, m: int) -> float:
    """Idle fraction of each stage over the whole step, p stages and m micro-batches: (p−1)/(m+p−1).

    The other convention, idle over the ideal time (Megatron-LM's), is `bubble_ratio`."""
    p, m = positive_int("stages", p), positive_int("microbatches", m)
    return (p - 1) / (m + p - 1)


def bubble_ratio(p: int, m: int, v: int = 1) -> float:
    """Idle time over ideal (busy) time: (p−1)/(v·m), Megatron-LM's "bubble time fraction"
    (Narayanan et al. 2021, §2.2.1; v > 1: interleaved 1F1B with v chunks per device, §2.2.2)."""
    p, m = positive_int("stages", p), positive_int("microbatches", m)
    v = positive_int("chunks per device", v)
    return (p - 1) / (v * m)


def step_fraction_from_ratio(b: float) -> float:
    """Idle over the whole step from idle over ideal time: f = b/(1 + b)."""
    return b / (1 + b)


def ratio_from_step_fraction(f: float) -> float:
    """Idle over ideal time from idle over the whole step: b = f/(1 − f)."""
    if not 0 <= f < 1:
        raise InputError(f"an idle fraction of the step must lie in [0, 1), got {f}")
    return f / (1 - f)


def interleaved_bubble_fraction(p: int, m: int, v: int) -> float:
    """Idle fraction of the whole step under interleaved 1F1B: b/(1 + b) with b = (p−1)/(v·m)."""
    return step_fraction_from_ratio(bubble_ratio(p, m, v))


def p2p_sends(p: int, m: int, v: int = 1) -> int:
    """Point-to-point sends per training step over all stages: every micro-batch crosses each of
    the v·p − 1 chunk boundaries once forward (activations) and once backward (gradients). With
    chunks placed round-robin (interleaved 1F1B) every chunk boundary is a device boundary."""
    p, m = positive_int("stages", p), positive_int("microbatches", m)
    v = positive_int("chunks per device", v)
    return 2 * m * (v * p - 1)


def in_flight_microbatches(schedule: str, p: int, m: int, stage: int) -> int:
    """Micro-batches whose activations a stage holds at once: GPipe all m (every forward runs before
    any backward); 1F1B at most p − stage (stage 0 warms up with p forwards, the last with one)."""
    schedule = check_schedule(schedule)
    if schedule == "gpipe":
        return m
    return min(m, p - stage)


def check_schedule(schedule: str) -> str:
    s = str(schedule).strip().lower()
    if s not in ("gpipe", "1f1b"):
        raise InputError(f"unknown schedule {schedule!r}: use gpipe or 1f1b")
    return s


# ---------------------------------------------------------------- FSDP


@dataclass(frozen=True)
class Unit:
    """One `fully_shard` unit: its name, the shapes of its parameters, whether it is the root."""

    name: str
    shapes: tuple[tuple[int, ...], ...]
    root: bool

    @property
    def numel(self) -> int:
        return sum(math.prod(s) for s in self.shapes)

    def padded_numel(self, n: int) -> int:
        """Elements of the all-gathered buffer: each parameter padded to n·ceil(d0/n) rows."""
        return sum(n * -(-s[0] // n) * math.prod(s[1:]) for s in self.shapes)


@lru_cache(maxsize=32)
def _units(cfg) -> tuple[Unit, ...]:
    return tuple(_build_units(cfg))


def fsdp_units(cfg) -> list[Unit]:
    """The units `perflab.shard.worker` shards: one per transformer block, and the root (the rest)."""
    return list(_units(cfg))


def _build_units(cfg) -> list[Unit]:
    import torch

    from perflab.workload.models import Transformer

    with torch.device("meta"):
        model = Transformer(cfg)
    in_blocks: set[int] = set()
    units = []
    for i, blk in enumerate(model.blocks):
        ps = list(blk.parameters())
        in_blocks |= {id(p) for p in ps}
        units.append(Unit(f"blocks.{i}", tuple(tuple(p.shape) for p in ps), False))
    rest = [p for p in model.parameters() if id(p) not in in_blocks]
    return [Unit("root", tuple(tuple(p.shape) for p in rest), True)] + units


def shard_rows(d0: int, n: int, rank: int) -> int:
    """Rows of a dim-0 size d0 that `torch.chunk(t, n)` gives rank `rank` (FSDP2's sharding)."""
    size = -(-d0 // n)
    return max(0, min(size, d0 - rank * size))


def fsdp_param_shard_bytes(cfg, n: int, rank: int, itemsize: int = FP32) -> int:
    """Exact bytes of the parameter shards rank `rank` holds under FSDP2 on n ranks."""
    return sum(shard_rows(s[0], n, rank) * math.prod(s[1:]) * itemsize for u in fsdp_units(cfg) for s in u.shapes)


@dataclass(frozen=True)
class StateBytes:
    """Model-state bytes on one rank: parameters, gradients, optimizer states."""

    param: float
    grad: float
    optim: float

    @property
    def total(self) -> float:
        return self.param + self.grad + self.optim


@dataclass(frozen=True)
class FsdpMemory:
    """One rank's model states under FSDP2: lesson 03's ZeRO-3 estimate, each named difference from it
    (bytes, + when FSDP holds more), and the exact bytes, estimate plus differences."""

    params: int  # N, the model's parameters
    tensors: int  # parameter tensors (one AdamW step counter each)
    estimate: StateBytes
    named: dict[str, float]
    exact: StateBytes


def fsdp_memory(cfg, n: int, rank: int = 0) -> FsdpMemory:
    """Lesson 03's ZeRO-3 prediction for one rank (fp32 weights, fp32 gradients, AdamW), and the exact
    bytes FSDP2 holds once the named differences are added."""
    from perflab.memory.estimate import model_state_bytes
    from perflab.workload.models import param_count

    n = positive_int("nproc", n)
    N = param_count(cfg)
    est = model_state_bytes(N, precision="fp32", optimizer="adamw", zero=3, dp=n)
    estimate = StateBytes(est["weights"], est["gradients"], est["optimizer_states"])
    shard = fsdp_param_shard_bytes(cfg, n, rank)
    tensors = sum(len(u.shapes) for u in fsdp_units(cfg))
    uneven = shard - est["weights"]
    named = {"uneven dim-0 shards (params)": uneven, "uneven dim-0 shards (grads)": uneven,
             "uneven dim-0 shards (2 AdamW moments)": 2 * uneven,
             "AdamW step counters (one fp32 per tensor)": tensors * FP32}
    return FsdpMemory(N, tensors, estimate, named, StateBytes(shard, shard, 2 * shard + tensors * FP32))


@dataclass(frozen=True)
class FsdpPeak:
    """What FSDP2 adds at its peak beyond the shards, per rank, in bytes (`fsdp_peak_unsharded`)."""

    params: int  # two units of unsharded parameters
    grads: int  # one unit of unsharded gradients
    total: int
    units: list[str]  # the two units: the root and the largest block
    unit_bytes: dict[str, int]  # every unit's padded, unsharded bytes


def fsdp_peak_unsharded(cfg, n: int, itemsize: int = FP32) -> FsdpPeak:
    """What FSDP2 adds at its peak beyond the shards, per rank: about two units of unsharded
    parameters and, in the backward, one unit of unsharded gradients.

    FSDP2 prefetches: while one unit computes, the next unit's all-gather is already in flight (the
    unit after it in the forward, before it in the backward), so two units' parameters are
    unsharded at once. The root unit (embedding, final norm) is not resharded after its forward
    (torch's default for the root), so it stays unsharded until the backward ends and is one of the
    two; with it, the largest block. In the backward, a unit's gradients are unsharded (the full
    padded buffer the reduce-scatter reduces) until the reduce-scatter has run. Bytes are of the
    padded all-gather buffers (`Unit.padded_numel`). An upper estimate of FSDP's own share: where a
    step's peak falls (a large logits gradient, say) decides how much of it is live then; the run
    measures it per rank (`perflab.shard.run`, `FsdpRankDetail.peak_holds`)."""
    n = positive_int("nproc", n)
    units = fsdp_units(cfg)
    root = next(u for u in units if u.root)
    block = max((u for u in units if not u.root), key=lambda u: u.padded_numel(n))
    params = (root.padded_numel(n) + block.padded_numel(n)) * itemsize
    grads = block.padded_numel(n) * itemsize
    return FsdpPeak(params, grads, params + grads, [root.name, block.name],
                    {u.name: u.padded_numel(n) * itemsize for u in units})


@dataclass(frozen=True)
class CommCount:
    """Calls of one collective per training step, and the bytes of the buffers they assemble or reduce."""

    calls: int
    bytes: int


@dataclass(frozen=True)
class FsdpComm:
    """FSDP's collectives per training step (see the module's docstring)."""

    all_gather: CommCount
    reduce_scatter: CommCount

    @property
    def calls(self) -> int:
        return self.all_gather.calls + self.reduce_scatter.calls

    @property
    def bytes(self) -> int:
        return self.all_gather.bytes + self.reduce_scatter.bytes

    def of(self, op: str) -> CommCount:
        """The count of "all_gather" or "reduce_scatter"."""
        return self.all_gather if op == "all_gather" else self.reduce_scatter


def fsdp_comm(cfg, n: int, itemsize: int = FP32) -> FsdpComm:
    """All-gather and reduce-scatter calls and bytes per training step (see the module's docstring)."""
    n = positive_int("nproc", n)
    units = fsdp_units(cfg)
    ag_calls = sum(1 if u.root else 2 for u in units)
    ag_bytes = sum((1 if u.root else 2) * u.padded_numel(n) * itemsize for u in units)
    rs_bytes = sum(u.padded_numel(n) * itemsize for u in units)
    return FsdpComm(CommCount(ag_calls, ag_bytes), CommCount(len(units), rs_bytes))


# ---------------------------------------------------------------- tensor parallelism


def check_tp(cfg, t: int) -> None:
    """Heads, KV heads and the MLP width must split evenly over t ranks."""
    t = positive_int("nproc", t)
    for what, v in (("heads", cfg.heads), ("kv_heads", cfg.n_kv), ("MLP width", cfg.d_ff)):
        if v % t:
            ok = [d for d in range(1, 9) if cfg.heads % d == 0 and cfg.n_kv % d == 0 and cfg.d_ff % d == 0]
            raise InputError(f"{cfg.name}'s {what} ({v}) do not split over {t} ranks: use --nproc among "
                             f"{', '.join(map(str, ok))}")


@dataclass(frozen=True)
class TpCalls:
    """Calls of one kind of collective in one training step, per block, and their bytes."""

    calls: int
    calls_per_block: int
    bytes: int


@dataclass(frozen=True)
class SequenceParallel:
    """What replaces each all-reduce under sequence parallelism: a reduce-scatter and an all-gather."""

    reduce_scatter: TpCalls
    all_gather: TpCalls


@dataclass(frozen=True)
class TpComm:
    """Tensor parallelism's all-reduces in one training step (`tp_comm`), and sequence parallelism's
    collectives in their place."""

    calls: int
    calls_per_block: int
    bytes: int
    bytes_per_call: int  # the block's b·s·h activations
    forward: TpCalls
    backward: TpCalls
    sequence_parallel: SequenceParallel

    def describe(self, batch: int, seq: int) -> str:
        """The count in words: all-reduces per block forward and backward, per step, each one's bytes, and
        sequence parallelism's collectives in their place (`batch`, `seq`: what the bytes were counted for)."""
        layers = self.calls // self.calls_per_block if self.calls_per_block else 0
        sp = self.sequence_parallel
        return (f"formula, one training step: {self.forward.calls_per_block} all-reduces per block in the forward + "
                f"{self.backward.calls_per_block} in the backward = {self.calls_per_block} × {layers} blocks = "
                f"{self.calls}, {self.bytes_per_call / 1e3:.1f} kB each (b·s·h·4 bytes, b = {batch}, s = {seq})\n"
                f"with sequence parallelism instead: {sp.reduce_scatter.calls} reduce-scatters + "
                f"{sp.all_gather.calls} all-gathers of the same b·s·h tensors")


def tp_comm(cfg, t: int, batch: int, seq: int, itemsize: int = FP32) -> TpComm:
    """Collectives of the transformer's blocks in one training step under tensor parallelism on t
    ranks (see the module's docstring): 2 forward all-reduces per block (after each row-parallel
    layer) and 2 backward ones (the input gradients of the column-parallel layers), each of the
    block's b·s·h activations. `sequence_parallel`: what replaces them with sequence parallelism,
    a reduce-scatter and an all-gather per all-reduce (bytes: the full b·s·h tensor each one reduces
    or assembles, as for FSDP's collectives)."""
    check_tp(cfg, t)
    per = batch * seq * cfg.hidden * itemsize if t > 1 else 0
    fwd = 2 * cfg.layers if t > 1 else 0
    bwd = 2 * cfg.layers if t > 1 else 0
    calls = fwd + bwd
    per_block = calls // cfg.layers
    swapped = TpCalls(calls, per_block, calls * per)
    return TpComm(calls, per_block, calls * per, per, TpCalls(fwd, fwd // cfg.layers, fwd * per),
                  TpCalls(bwd, bwd // cfg.layers, bwd * per), SequenceParallel(swapped, swapped))


def tp_param_bytes(cfg, t: int, itemsize: int = FP32) -> int:
    """Bytes of the blocks' parameters on one rank: column-parallel weights and biases and
    row-parallel weights split t ways; the row-parallel biases and the norms replicated."""
    check_tp(cfg, t)
    h, d, a, kv, f = cfg.hidden, cfg.d_head, cfg.heads, cfg.n_kv, cfg.d_ff
    b = 1 if cfg.bias else 0
    col = (h * a * d + 2 * h * kv * d) + b * (a * d + 2 * kv * d) + (2 if cfg.glu else 1) * (h * f + b * f)
    row = a * d * h + f * h
    norm = (2 if cfg.norm == "layernorm" and cfg.bias else 1) * h
    repl = 2 * b * h + 2 * norm
    return cfg.layers * ((col + row) // t + repl) * itemsize


# ---------------------------------------------------------------- pipeline timelines


@dataclass(frozen=True)
class Replay:
    """A pipeline's timeline replayed with instant hand-offs: the wall time, and each stage's busy
    seconds and bubble (idle fraction of the wall time)."""

    wall_s: float
    busy_s: list[float]
    bubble: list[float]


def replay(timelines: list[list[tuple[str, float]]]) -> Replay:
    """Replay a pipeline's measured timeline with instant hand-offs.

    `timelines[s]` is stage s's operations in the order it ran them, each ("F" or "B", seconds);
    the i-th F of a stage is micro-batch i's forward and the i-th B its backward. Each operation
    starts when the stage is free and its input exists: the previous stage's forward of the same
    micro-batch (F), the next stage's backward of it (B). Returns the replayed wall time and each
    stage's busy seconds and bubble. With every F and every B of equal length this gives exactly
    (p−1)/(m+p−1); what the measured wall time adds on top are the hand-offs (messages, processes
    waking up), named `stalls` by the caller.
    """
    p = len(timelines)
    if p == 0:
        raise InputError("no stages to replay")
    f_end: dict[tuple[int, int], float] = {}
    b_end: dict[tuple[int, int], float] = {}
    pos = [0] * p
    free = [0.0] * p
    counts = [{"F": 0, "B": 0} for _ in range(p)]
    total = sum(len(t) for t in timelines)
    done = 0
    while done < total:
        progressed = False
        for s in range(p):
            while pos[s] < len(timelines[s]):
                kind, dur = timelines[s][pos[s]]
                i = counts[s][kind]
                if kind == "F":
                    dep = 0.0 if s == 0 else f_end.get((s - 1, i))
                else:
                    dep = f_end.get((s, i)) if s == p - 1 else b_end.get((s + 1, i))
                if dep is None:
                    break
                start = max(free[s], dep)
                free[s] = start + dur
                (f_end if kind == "F" else b_end)[(s, i)] = free[s]
                counts[s][kind] += 1
                pos[s] += 1
                done += 1
                progressed = True
        if not progressed:
            raise InputError("the timelines deadlock: every stage waits for an operation that never runs")
    wall = max(free)
    busy = [sum(d for _, d in t) for t in timelines]
    return Replay(wall, busy, [1 - b / wall if wall else 0.0 for b in busy])
