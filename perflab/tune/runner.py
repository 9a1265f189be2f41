"""Apply the ladder's rungs to one training step, cumulatively, and measure every rung.

    >>> res = run_ladder("cpu")                       # every rung; resumes from saved rungs
    >>> res = run_ladder("cpu", rungs="sdpa,compile", fresh=True)
    >>> res.rows[-1]["speedup_vs_baseline"], res.fastest["rung"]

Each rung's row: `rung`, `step_s` (median wall seconds of one optimizer step, data wait included),
`tokens_per_s`, `mfu`/`hfu` (against the spec peak of the dtype that ran where the spec sheet has
one, else against the ceiling measured for that dtype by the rule the audit and the lessons share:
`mfu_basis` says which and `mfu_basis_label` names it with its figure and date,
`perflab.flops.mfu.mfu_basis`; above 100 % no figure, `mfu_suspect` says why), `peak_bytes`, `loss` (after
warmup + steps optimizer steps), `loss_delta` (against the baseline's), `parity_ok` (within the
dtype's tolerance, `perflab.compiler.parity`), `speedup_vs_previous` (the median per-pair ratio of the
interleaved timing) with its `interval`, `speedup_vs_baseline` (the product of the adopted rungs'
ratios), `verdict` ('adopted', 'kept out', 'inconclusive', 'n/a' or 'broke parity', see
`perflab.tune.verdict`), `adopted`, `noisy` (untouched categories that moved beyond the stated noise),
`explain` and `note`, plus the step's phases and the waterfall's breakdown.

A rung that does not apply here (NUMA binding on one node, checkpointing where memory does not need
it) is recorded with `applicable: false`, its reason, and the figures of the configuration it leaves
unchanged (`measured: false`). Rows are saved as they are measured (`perflab.core.results`), so a
ladder stopped halfway resumes; `fresh=True` sets the old file aside and measures again.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

from perflab.core.dtypes import native_bf16
from perflab.core.errors import InputError, PerflabError
from perflab.core.validate import positive_int
from perflab.flops.mfu import Basis, mfu_basis
from perflab.tune.ladder import TunePreset, parse_rungs
from perflab.tune.ladder import preset as tune_preset
from perflab.tune.ladder import rung as rung_of
from perflab.tune.verdict import ADOPT_MIN_GAIN
from perflab.workload.models import Attention, ModelConfig, build_model
from perflab.workload.train import StepRunner, next_token_loss

PAD_MULTIPLE = 64
FIELDS = ("rung", "step_s", "tokens_per_s", "mfu", "hfu", "peak_bytes", "loss_delta", "speedup_vs_baseline")


class ParityError(PerflabError):
    """A rung changed the model's loss beyond the dtype's tolerance: the ladder stops there."""


# ---------------------------------------------------------------- a step's configuration


@dataclass(frozen=True)
class StepConfig:
    """Everything the ladder changes about the step (the baseline is the default)."""

    dtype: str = "fp32"  # 'fp32' or 'bf16' (autocast)
    optimizer: str = "loop"  # 'loop' (for-loop AdamW), 'foreach' or 'fused'
    pad_vocab: bool = False
    sdpa: bool = False  # False: attention written out (softmax(QKᵀ/√d)·V)
    compiled: bool = False
    micro_batch: int = 2
    checkpointing: bool = False
    workers: int = 0
    pin_memory: bool = False
    numa_node: int | None = None  # bound to this node's CPUs

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class WrittenOutAttention(Attention):
    """perflab's attention with the product written out, as a first script does: the s×s scores
    are stored (and kept for backward) instead of going through one fused SDPA kernel."""

    def forward(self, x, rope=None):
        b, s, _ = x.shape
        c = self.cfg
        q = self.q(x).view(b, s, c.heads, c.d_head).transpose(1, 2)
        k = self.k(x).view(b, s, c.n_kv, c.d_head).transpose(1, 2)
        v = self.v(x).view(b, s, c.n_kv, c.d_head).transpose(1, 2)
        if c.n_kv != c.heads:
            k = k.repeat_interleave(c.heads // c.n_kv, dim=1)
            v = v.repeat_interleave(c.heads // c.n_kv, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(c.d_head)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        y = F.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
        return self.o(y.transpose(1, 2).reshape(b, s, c.heads * c.d_head))


def padded_vocab(vocab: int, multiple: int = PAD_MULTIPLE) -> int:
    return -(-vocab // multiple) * multiple


def build(cfg: ModelConfig, sc: StepConfig, device: torch.device) -> torch.nn.Module:
    """The model of configuration `sc`: same initial weights for every configuration (torch.manual_seed(0))."""
    if cfg.positions != "learned" or not cfg.tied:
        raise InputError("the tuning ladder runs GPT-shaped models (learned positions, tied embeddings)")
    model = build_model(cfg, device=device, seed=0)
    if not sc.sdpa:
        for blk in model.blocks:
            attn: Any = blk.attn
            attn.__class__ = WrittenOutAttention
    if sc.pad_vocab and padded_vocab(cfg.vocab) != cfg.vocab:
        old = model.embed.weight.data
        new = torch.zeros(padded_vocab(cfg.vocab), cfg.hidden, device=old.device, dtype=old.dtype)
        new[: cfg.vocab] = old  # zero rows: their logits are cut off before the loss, so nothing changes
        model.embed = torch.nn.Embedding.from_pretrained(new, freeze=False)
    model.checkpointing = sc.checkpointing
    return model


def make_optimizer(params, kind: str, device: torch.device) -> torch.optim.Optimizer:
    kw: dict[str, Any] = {"lr": 1e-3}
    if kind == "loop":
        kw["foreach"] = False
    elif kind == "foreach":
        kw["foreach"] = True
    elif kind == "fused":
        kw["fused"] = True
    else:
        raise InputError(f"unknown optimizer kind {kind!r}")
    return torch.optim.AdamW(params, **kw)


def fused_adamw_available(device: torch.device) -> bool:
    """torch's fused AdamW runs on CUDA, and on CPU since torch 2.4."""
    try:
        p = torch.nn.Parameter(torch.zeros(2, device=device))
        opt = torch.optim.AdamW([p], fused=True)
        p.grad = torch.zeros_like(p)
        opt.step()
        return True
    except (RuntimeError, TypeError, ValueError):
        return False


# ---------------------------------------------------------------- data


class TokenSequences(torch.utils.data.Dataset):
    """Sequence i of a fixed random corpus (inputs, next-token targets), read with `io_s` of storage
    latency (a wait that uses no core, as lesson 07's dataset). Deterministic per index, so every
    configuration sees the same sequences in the same order."""

    def __init__(self, n: int, seq: int, vocab: int, io_s: float = 0.0, seed: int = 0):
        self.n, self.seq, self.vocab, self.io_s, self.seed = n, seq, vocab, io_s, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.io_s:
            time.sleep(self.io_s)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        ids = torch.randint(0, self.vocab, (self.seq + 1,), generator=g)
        return ids[:-1], ids[1:]


def make_loader(ds: TokenSequences, sc: StepConfig, device: torch.device):
    kw: dict[str, Any] = {}
    if sc.workers > 0:
        kw = {"prefetch_factor": 4, "persistent_workers": False}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        return torch.utils.data.DataLoader(ds, batch_size=sc.micro_batch, shuffle=False, num_workers=sc.workers,
                                           pin_memory=sc.pin_memory and device.type == "cuda", **kw)


@contextlib.contextmanager
def bound_to(cpus: list[int] | None):
    """This process (and the DataLoader workers it starts) on `cpus` while inside; restored after."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield
        return
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)


# ---------------------------------------------------------------- one configuration, measured


@dataclass
class Measurement:
    step_s: float
    step_times_s: list[float]
    data_wait_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    compile_s: float | None
    tokens_per_step: int
    losses: list[float]
    peak_bytes: int
    peak_how: str
    model_flops: int
    hardware_flops: int
    breakdown: dict[str, float] = field(default_factory=dict)
    quietness: Any = None  # perflab.core.quietness.Quietness of the timed steps
    waited_s: float = 0.0  # seconds spent waiting for the device's lock before measuring

    @property
    def loss(self) -> float:
        return self.losses[-1]


def _static_bytes(model: torch.nn.Module, opt: torch.optim.Optimizer) -> int:
    n = sum(p.numel() * p.element_size() for p in model.parameters())
    for st in opt.state.values():
        n += sum(v.numel() * v.element_size() for v in st.values() if torch.is_tensor(v))
    return n


class _Arm:
    """One configuration ready to step: its model, optimizer, loader and CPU binding, built from the
    same weights and data as every other configuration (so step i trains on the same sequences)."""

    def __init__(self, tp: TunePreset, sc: StepConfig, device: torch.device, n_steps: int):
        cfg, G, mb = tp.cfg, tp.global_batch, sc.micro_batch
        if G % mb:
            raise InputError(f"micro-batch {mb} does not divide the global batch {G}: choose a divisor of {G}")
        self.tp, self.sc, self.device, self.gas = tp, sc, device, G // mb
        self.cpus = None
        if sc.numa_node is not None:
            from perflab.numa.topology import read_topology

            self.cpus = next((n.cpus for n in read_topology().nodes if n.id == sc.numa_node), None)
        ds = TokenSequences(G * n_steps, tp.seq, cfg.vocab, tp.io_ms / 1e3)
        with bound_to(self.cpus):
            self.model = build(cfg, sc, device)
            self.opt = make_optimizer(self.model.parameters(), sc.optimizer, device)
            fwd: Any = torch.compile(self.model) if sc.compiled else self.model
            self.micro_losses: list[torch.Tensor] = []
            V = cfg.vocab

            def loss_fn(logits, y):
                loss = next_token_loss(logits[..., :V], y)
                self.micro_losses.append(loss.detach())
                return loss

            self.runner = StepRunner(fwd, self.opt, grad_accum=self.gas,
                                     autocast_dtype=torch.bfloat16 if sc.dtype == "bf16" else None,
                                     loss_fn=loss_fn, device=device)
            self.it = iter(make_loader(ds, sc, device))
        self.nb = sc.pin_memory and device.type == "cuda"
        self.losses: list[float] = []
        self.walls: list[float] = []  # every step's wall time, warmup included
        self.datas: list[float] = []
        self.times: list[Any] = []

    def _batches(self):
        out = []
        for _ in range(self.gas):
            x, y = next(self.it)
            out.append((x.to(self.device, non_blocking=self.nb), y.to(self.device, non_blocking=self.nb)))
        return out

    def one_step(self):
        t0 = time.perf_counter()
        with torch.profiler.record_function("data"):
            mbs = self._batches()
        data_s = time.perf_counter() - t0
        self.micro_losses.clear()
        t = self.runner.step(mbs)
        loss = float(torch.stack(self.micro_losses).mean())
        return data_s, t, loss

    def timed_step(self) -> float:
        """One step, recorded: its wall time (data wait included)."""
        with bound_to(self.cpus):
            t0 = time.perf_counter()
            d, t, loss = self.one_step()
            wall = time.perf_counter() - t0
        self.losses.append(loss)
        self.walls.append(wall)
        self.datas.append(d)
        self.times.append(t)
        return wall

    def finish(self, warmup: int, profile: bool, skip: set[int] | frozenset[int] = frozenset()) -> Measurement:
        """Peak memory from one more step, the waterfall from one profiled step, and the figures of
        the timed steps (those after `warmup`, except the step indices in `skip`: steps timed while the
        machine was disturbed)."""
        tp, sc, device = self.tp, self.sc, self.device
        use = [i for i in range(warmup, len(self.walls)) if i not in skip] or list(range(warmup, len(self.walls)))
        walls = [self.walls[i] for i in use]
        datas = [self.datas[i] for i in use]
        times = [self.times[i] for i in use]
        step_s = statistics.median(walls)
        compile_s = max(self.walls[0] - step_s, 0.0) if sc.compiled and self.walls else None
        with bound_to(self.cpus):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                peak = torch.cuda.max_memory_allocated(device)
                how = "torch.cuda.max_memory_allocated over the run"
            else:
                from perflab.memory.probe import allocated_during
                from perflab.tune.waterfall import _quiet_fd2

                base = _static_bytes(self.model, self.opt) + 2 * tp.global_batch // self.gas * tp.seq * 8 * 2
                with _quiet_fd2():  # the profiler's allocator notes are C++ lines on fd 2
                    rise = allocated_during(self.one_step, device)["peak_bytes"]
                peak = base + rise
                how = "weights + AdamW states + batches, plus the step's allocations (profiler memory events)"
            breakdown: dict[str, float] = {}
            if profile:
                from perflab.tune.waterfall import breakdown_of_trace, profile_steps

                breakdown = breakdown_of_trace(profile_steps(self.one_step, device), step_s)
        from perflab.flops.transformer import exact_flops

        cfg, mb = tp.cfg, sc.micro_batch
        hw_cfg = cfg.with_(vocab=padded_vocab(cfg.vocab)) if sc.pad_vocab else cfg
        mf = exact_flops(cfg, mb, tp.seq, checkpointing=sc.checkpointing, fused_attention=sc.sdpa).model * self.gas
        hf = exact_flops(hw_cfg, mb, tp.seq, checkpointing=sc.checkpointing, fused_attention=sc.sdpa).hardware * self.gas
        return Measurement(step_s, walls, statistics.median(datas), statistics.median(t.forward_s for t in times),
                           statistics.median(t.backward_s for t in times),
                           statistics.median(t.optimizer_s for t in times), compile_s, tp.global_batch * tp.seq,
                           list(self.losses), int(peak), how, mf, hf, breakdown)


def measure_config(tp: TunePreset, sc: StepConfig, *, steps: int, warmup: int, device: torch.device,
                   profile: bool = True, progress: Callable[[str], None] | None = None) -> Measurement:
    """Train `warmup + steps` optimizer steps of configuration `sc` from the same weights and data,
    time the last `steps`, then one step for its peak memory and one profiled step for the waterfall.
    The device's lock is held throughout and the timed steps are watched (`Measurement.quietness`)."""
    from perflab.core.lock import device_lock
    from perflab.core.quietness import watch

    arm = _Arm(tp, sc, device, warmup + steps + 2)  # + one for memory, + one profiled
    with device_lock(device, label="a ladder rung") as waited:
        for i in range(warmup):
            arm.timed_step()
            if progress:
                progress(f"step {i + 1}/{warmup + steps}")
        with watch(device) as w:
            for i in range(warmup, warmup + steps):
                arm.timed_step()
                if progress:
                    progress(f"step {i + 1}/{warmup + steps}")
        m = arm.finish(warmup, profile)
    return replace(m, quietness=w.result, waited_s=waited)


@dataclass
class PairMeasurement:
    """A rung timed interleaved with the configuration it changes, block by block."""

    candidate: Measurement
    prev_times_s: list[float]  # the previous configuration's timed steps in the kept blocks, pair by pair
    interval: Any  # perflab.tune.verdict.Interval
    verdict: str  # 'adopted', 'kept out' or 'inconclusive' (parity and budget are checked after)
    timed_s: float  # seconds the interleaved timing took
    decision: Any = None  # perflab.tune.verdict.Verdict: why, its blocks and their quietness
    waited_s: float = 0.0  # seconds spent waiting for the device's lock first


def measure_pair(tp: TunePreset, prev: StepConfig, cand: StepConfig, *, min_pairs: int, warmup: int,
                 device: torch.device, budget_s: float, max_pairs: int = 60, profile: bool = True,
                 progress: Callable[[str], None] | None = None) -> PairMeasurement:
    """Time `cand` against `prev` step by step in turn (prev, cand, then cand, prev, ...) after
    `warmup` steps of each, in blocks each watched for other programs (`perflab.tune.verdict`), until
    the verdict is decided (`perflab.tune.verdict.judge`, after at least `min_pairs` pairs in
    undisturbed blocks) or `budget_s` seconds of timing are spent (`max_pairs` at most). A disturbed
    block is dropped, so it is measured again while the budget lasts. Both configurations start from
    the same weights and read the same sequences in the same order, so their losses after equal steps
    are comparable. The device's lock is held throughout."""
    from perflab.core.lock import device_lock
    from perflab.core.quietness import watch
    from perflab.tune.verdict import BLOCK_MIN_S, BLOCK_PAIRS, Block, run_blocks

    n_steps = warmup + max_pairs + 2
    a, b = _Arm(tp, prev, device, n_steps), _Arm(tp, cand, device, n_steps)
    steps_of: list[list[int]] = []  # the candidate's step indices in each block
    k = 0

    def next_block() -> Block:
        nonlocal k
        pa: list[float] = []
        pb: list[float] = []
        first = len(b.walls)
        with watch(device) as w:
            tb = time.perf_counter()
            while k < max_pairs and (len(pa) < BLOCK_PAIRS or time.perf_counter() - tb < BLOCK_MIN_S):
                if k % 2 == 0:
                    pa.append(a.timed_step())
                    pb.append(b.timed_step())
                else:
                    pb.append(b.timed_step())
                    pa.append(a.timed_step())
                k += 1
        steps_of.append(list(range(first, len(b.walls))))
        return Block(tuple(pa), tuple(pb), w.result)

    with device_lock(device, label="a ladder rung") as waited:
        for _ in range(warmup):
            a.timed_step()
            b.timed_step()
        t0 = time.perf_counter()
        decision = run_blocks(next_block, least_pairs=min_pairs, progress=progress,
                              out_of_budget=lambda: k >= max_pairs or time.perf_counter() - t0 > budget_s)
        spent = time.perf_counter() - t0
        blocks = decision.blocks
        kept = [i for i, x in enumerate(blocks) if x.kept] or list(range(len(blocks)))
        skip = {j for i in range(len(blocks)) if i not in kept for j in steps_of[i]}
        cand_m = b.finish(warmup, profile, skip=skip)
    prev_times = [t for i in kept for t in blocks[i].prev_s]
    cand_m = replace(cand_m, quietness=decision.quietness, waited_s=waited)
    return PairMeasurement(cand_m, prev_times, decision.interval, decision.verdict, spent, decision, waited)


# ---------------------------------------------------------------- utilization


def step_shape(tp: TunePreset) -> tuple[int, int, int]:
    """(m, n, k) of the preset's largest GEMM at its largest micro-batch: the logits of the whole
    global batch (tokens × padded vocabulary × hidden). For the cpu preset this is
    `perflab.flops.mfu.CEILING_SHAPE_CPU`, the shape every CPU ceiling is measured at."""
    return tp.global_batch * tp.seq, padded_vocab(tp.cfg.vocab), tp.cfg.hidden


def mfu_fields(m: Measurement, basis: Basis) -> dict[str, Any]:
    """A rung's MFU and HFU against the basis of the dtype it ran in (`perflab.flops.mfu.utilization`),
    as the row's fields: above 100 % no figure, and `mfu_suspect` says why."""
    from perflab.flops.mfu import utilization

    dt = basis.dtype
    u = utilization(m.step_s, {dt: m.model_flops}, {dt: basis}, {dt: m.hardware_flops})
    spec = basis.kind == "spec peak"
    return {"model_tflops": u.model_tflops, "hardware_tflops": u.hardware_tflops,
            "peak_tflops": basis.tflops if spec else None,
            "peak_source": "spec sheet" if spec else "peak unknown: no spec sheet",
            "ceiling_tflops": None if spec else basis.tflops, "ceiling_label": basis.label(),
            "mfu_spec": u.mfu if spec else None, "hfu_spec": u.hfu if spec else None,
            "mfu_ceiling": None if spec else u.mfu, "hfu_ceiling": None if spec else u.hfu,
            "mfu": u.mfu, "hfu": u.hfu, "mfu_suspect": u.suspect,
            "mfu_basis": "spec peak" if spec else "measured ceiling", "mfu_basis_label": basis.label(),
            "mfu_basis_info": basis.as_dict()}


# ---------------------------------------------------------------- the rungs as changes


def predicted_peak(tp: TunePreset, sc: StepConfig, micro: int, checkpointing: bool, device: torch.device) -> int:
    """Lesson 03's estimator: the step's predicted peak bytes at this micro-batch."""
    from perflab.memory.estimate import step_phases

    cfg = tp.cfg.with_(vocab=padded_vocab(tp.cfg.vocab)) if sc.pad_vocab else tp.cfg
    opt = "adamw-fused" if sc.optimizer != "loop" else "adamw"
    dev = "cuda" if device.type == "cuda" else "cpu"
    phases = step_phases(cfg, micro, tp.seq, dtype="fp32", optimizer=opt,
                         recompute="full" if checkpointing else "none", device=dev)
    return max(p.peak_bytes for p in phases)


def memory_budget(tp: TunePreset, device: torch.device) -> int:
    if tp.memory_budget_bytes is not None:
        return tp.memory_budget_bytes
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return int(min(free, total) * 0.9)
    raise InputError(f"preset {tp.name!r} has no memory budget for a {device.type} device")


def largest_fitting(tp: TunePreset, sc: StepConfig, device: torch.device, checkpointing: bool) -> tuple[int, int]:
    """(micro-batch, its predicted peak): the largest divisor of the global batch, no smaller than the
    current micro-batch, whose predicted peak fits the budget (the current one if none larger fits)."""
    budget = memory_budget(tp, device)
    G = tp.global_batch
    for mb in sorted((d for d in range(1, G + 1) if G % d == 0 and d >= sc.micro_batch), reverse=True):
        p = predicted_peak(tp, sc, mb, checkpointing, device)
        if p <= budget:
            return mb, p
    return sc.micro_batch, predicted_peak(tp, sc, sc.micro_batch, checkpointing, device)


@dataclass
class Change:
    config: StepConfig
    applicable: bool
    note: str
    extra: dict[str, Any] = field(default_factory=dict)


def apply_rung(name: str, sc: StepConfig, tp: TunePreset, device: torch.device, history: Sequence[dict]) -> Change:
    """The configuration after rung `name` on top of `sc`, or why it does not apply here."""
    if name == "baseline":
        return Change(replace(StepConfig(), micro_batch=tp.micro_batch), True, "the reference")
    if name == "bf16":
        ok, why = native_bf16(device)
        return Change(replace(sc, dtype="bf16"), True, ("native bf16 here: " if ok else "no native bf16: ") + why,
                      {"native_bf16": ok})
    if name == "adamw":
        kind = "fused" if fused_adamw_available(device) else "foreach"
        return Change(replace(sc, optimizer=kind), True, f"AdamW with {kind}=True")
    if name == "vocab64":
        v, p = tp.cfg.vocab, padded_vocab(tp.cfg.vocab)
        if v == p:
            return Change(sc, False, f"the vocabulary ({v:,}) is already a multiple of {PAD_MULTIPLE}")
        return Change(replace(sc, pad_vocab=True), True, f"vocabulary {v:,} → {p:,} ({p - v} zero rows)")
    if name == "sdpa":
        return Change(replace(sc, sdpa=True), True, "F.scaled_dot_product_attention(is_causal=True)")
    if name == "compile":
        return Change(replace(sc, compiled=True), True, "torch.compile(model), inductor")
    if name == "batch":
        mb, pred = largest_fitting(tp, sc, device, checkpointing=sc.checkpointing)
        budget = memory_budget(tp, device)
        if mb == sc.micro_batch:
            return Change(sc, False, f"no larger micro-batch fits the budget of {_mib(budget)} "
                                     f"(micro-batch {mb}: predicted {_mib(pred)})", {"predicted_peak_bytes": pred})
        return Change(replace(sc, micro_batch=mb), True,
                      f"micro-batch {sc.micro_batch} → {mb} (accumulation {tp.global_batch // sc.micro_batch} → "
                      f"{tp.global_batch // mb}); predicted peak {_mib(pred)} of a {_mib(budget)} budget",
                      {"predicted_peak_bytes": pred, "budget_bytes": budget})
    if name == "checkpoint":
        if sc.micro_batch == tp.global_batch:
            return Change(sc, False, "memory does not need it: the whole global batch already fits in one micro-batch")
        plain, _ = largest_fitting(tp, sc, device, checkpointing=False)
        if plain > sc.micro_batch:
            return Change(sc, False, f"memory does not need it: micro-batch {plain} fits without checkpointing "
                                     "(the batch rung raises it)")
        mb, pred = largest_fitting(tp, sc, device, checkpointing=True)
        budget = memory_budget(tp, device)
        if mb <= sc.micro_batch:
            return Change(sc, False, f"even with checkpointing no larger micro-batch fits {_mib(budget)}",
                          {"predicted_peak_bytes": pred})
        return Change(replace(sc, micro_batch=mb, checkpointing=True), True,
                      f"memory capped the micro-batch at {sc.micro_batch}: with every block recomputed, {mb} fits "
                      f"(predicted {_mib(pred)} of {_mib(budget)})", {"predicted_peak_bytes": pred, "budget_bytes": budget})
    if name == "loader":
        from perflab.dataloading.loader import available_cores

        w = max(1, min(2, available_cores() - 1)) if available_cores() > 1 else 1
        pin = device.type == "cuda"
        return Change(replace(sc, workers=w, pin_memory=pin), True,
                      f"{w} DataLoader worker{'s' if w > 1 else ''}" + (", pinned memory + non_blocking copies" if pin
                                                                       else "; pinned memory has no effect without an accelerator"))
    if name == "numa":
        from perflab.numa.topology import read_topology

        topo = read_topology()
        if len(topo.nodes) < 2:
            return Change(sc, False, f"one NUMA node here ({len(topo.nodes)}): every core is already local to all "
                                     "memory, so there is nothing to bind")
        node = topo.gpus[0].numa_node if (device.type == "cuda" and topo.gpus and topo.gpus[0].numa_node is not None) else 0
        return Change(replace(sc, numa_node=node), True, f"bound to NUMA node {node}'s CPUs")
    raise InputError(f"unknown rung {name!r}")


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


# ---------------------------------------------------------------- the ladder


def tolerance_for(dtype: str) -> float:
    from perflab.compiler.parity import tolerance

    return tolerance(torch.bfloat16 if dtype == "bf16" else torch.float32)


@dataclass
class LadderResult:
    preset: str
    device: str
    rows: list[dict[str, Any]]
    stopped: str | None  # why the ladder stopped early (a parity failure), else None
    path: str
    measured: int = 0
    resumed: int = 0

    @property
    def baseline(self) -> dict[str, Any]:
        return self.rows[0]

    @property
    def fastest(self) -> dict[str, Any]:
        ok = [r for r in self.rows if r.get("parity_ok")]
        return min(ok, key=lambda r: r["step_s"])

    @property
    def final(self) -> dict[str, Any]:
        """The configuration the ladder ends with (the last adopted rung)."""
        adopted = [r for r in self.rows if r.get("adopted")]
        return adopted[-1] if adopted else self.rows[0]

    def table(self):
        import pandas as pd

        return pd.DataFrame([{k: r.get(k) for k in FIELDS + ("adopted", "note")} for r in self.rows])

    def frame(self):
        """The rows for a person: every figure rounded, with its unit, and each rung's verdict with its
        interval (`perflab.tune.verdict`). MFU/HFU are against `basis()`; above 100 % is never shown
        without its reason."""
        import pandas as pd

        from perflab.core.readout import mib, num, seconds

        out = []
        for r in self.rows:
            lo_hi = r.get("interval")
            vs_prev = "–" if r["rung"] == "baseline" else (
                f"{r['speedup_vs_previous']:.2f}× ({lo_hi[0]:.2f}–{lo_hi[1]:.2f})"
                if lo_hi and r.get("measured") and math.isfinite(lo_hi[1])
                else f"{r.get('speedup_vs_previous', 1.0):.2f}×")
            out.append({"rung": r["rung"], "step": seconds(r["step_s"]), "tokens/s": num(r["tokens_per_s"]),
                        "MFU": _pct(r.get("mfu")), "HFU": _pct(r.get("hfu")), "peak memory": mib(r["peak_bytes"]),
                        "loss Δ vs baseline": f"{r['loss_delta']:+.1e}",
                        f"vs previous ({_conf(self.rows)} interval)": vs_prev,
                        "vs baseline": f"{r['speedup_vs_baseline']:.2f}×", "verdict": (r.get("verdict") or (
                            "adopted" if r.get("adopted") else "kept out")) + (" (machine busy)" if r.get("busy") else "")})
        return pd.DataFrame(out)

    def basis(self) -> str:
        """What the MFU/HFU columns are divided by, per dtype that ran (`perflab.flops.mfu.Basis`)."""
        seen: dict[str, str] = {}
        for r in self.rows:
            lab = r.get("mfu_basis_label")
            if lab and lab not in seen.values():
                seen[r.get("config", {}).get("dtype", "?")] = lab
        return "; ".join(seen.values()) or "unknown"

    def as_dict(self) -> dict[str, Any]:
        return {"preset": self.preset, "device": self.device, "rows": self.rows, "stopped": self.stopped,
                "results_file": self.path, "fastest": self.fastest["rung"] if self.rows else None}


def parity_index(tp: TunePreset) -> int:
    """The step whose loss every configuration is compared at: after warmup + steps optimizer steps."""
    return tp.warmup + tp.steps - 1


# the category each rung attacks (its explanation reads this category of the step before it)
ATTACKS = {"bf16": "compute", "adamw": "optimizer", "vocab64": "compute", "sdpa": "compute", "compile": "compute",
           "batch": "compute", "checkpoint": "compute", "loader": "data_wait", "numa": "compute"}


def _row_from(name: str, change: Change, m: Measurement | None, prev: dict | None, base: dict | None,
              r: Basis | None, tp: TunePreset, device: torch.device, pair: PairMeasurement | None = None
              ) -> dict[str, Any]:
    from perflab.tune.verdict import Interval, decide, noise_allowance_s, untouched_moves

    info = rung_of(name)
    row: dict[str, Any] = {"rung": name, "title": info.title, "lesson": info.lesson, "changes": info.changes,
                           "applicable": change.applicable, "note": change.note, "config": change.config.as_dict(),
                           **change.extra}
    if m is None:  # not applicable: the configuration it leaves unchanged
        assert prev is not None
        for k in ("step_s", "step_times_s", "tokens_per_s", "mfu", "hfu", "mfu_spec", "hfu_spec", "mfu_ceiling",
                  "hfu_ceiling", "mfu_suspect", "mfu_basis", "mfu_basis_label", "mfu_basis_info", "peak_tflops", "peak_source",
                  "ceiling_tflops", "ceiling_label", "model_tflops", "hardware_tflops", "peak_bytes", "peak_how",
                  "loss", "losses", "data_wait_s", "forward_s", "backward_s", "optimizer_s", "compile_s", "breakdown",
                  "tokens_per_step"):
            row[k] = prev.get(k)
        row.update(measured=False, adopted=False, verdict="n/a", parity_ok=prev.get("parity_ok"),
                   tolerance=prev.get("tolerance"), loss_delta=prev.get("loss_delta"), loss_rel=prev.get("loss_rel"),
                   speedup_vs_baseline=prev.get("speedup_vs_baseline"), speedup_vs_previous=1.0, explain=change.note)
        return row
    assert r is not None
    loss = m.losses[min(parity_index(tp), len(m.losses) - 1)]
    row.update(measured=True, step_s=m.step_s, step_times_s=m.step_times_s, tokens_per_step=m.tokens_per_step,
               tokens_per_s=m.tokens_per_step / m.step_s, peak_bytes=m.peak_bytes, peak_how=m.peak_how,
               loss=loss, losses=m.losses, data_wait_s=m.data_wait_s, forward_s=m.forward_s,
               backward_s=m.backward_s, optimizer_s=m.optimizer_s, compile_s=m.compile_s, breakdown=m.breakdown,
               model_flops_per_step=m.model_flops, hardware_flops_per_step=m.hardware_flops, **mfu_fields(m, r))
    tol = tolerance_for(change.config.dtype)
    b_loss = loss if base is None else base["loss"]
    row["loss_delta"] = loss - b_loss
    row["loss_rel"] = abs(row["loss_delta"]) / max(abs(b_loss), 1e-12)
    row["tolerance"] = tol
    row["parity_ok"] = row["loss_rel"] <= tol
    row["quietness"] = m.quietness.to_json() if m.quietness is not None else None
    row["waited_s"] = m.waited_s
    if prev is None:
        row.update(speedup_vs_previous=1.0, speedup_vs_baseline=1.0, verdict="reference", adopted=False,
                   interval=None)
        row["explain"] = explain(name, row, None, device)
        return row
    if pair is not None:
        iv, verdict = pair.interval, pair.verdict
        row["pairs"] = iv.pairs
        row["prev_times_s"] = pair.prev_times_s
        row["timed_s"] = pair.timed_s
        if pair.decision is not None:
            d = pair.decision.to_json()
            row.update(verdict_reason=d["reason"], busy=d["busy"], blocks=d["blocks"], blocks_kept=d["blocks_kept"],
                       blocks_dropped=d["blocks_dropped"])
        allowance = noise_allowance_s(pair.prev_times_s, m.step_times_s, prev["step_s"])
    else:  # one timing of each, not interleaved: a point, no interval
        sp = prev["step_s"] / m.step_s
        iv = Interval(sp, sp, sp, 1)
        verdict = decide(iv)
        allowance = noise_allowance_s([prev["step_s"]], m.step_times_s, prev["step_s"])
    row["interval"] = [iv.lo, iv.hi]
    row["confidence"] = iv.confidence
    row["threshold"] = 1 + ADOPT_MIN_GAIN
    row["speedup_vs_previous"] = iv.point
    row["speedup_vs_baseline"] = float(prev.get("speedup_vs_baseline") or 1.0) * iv.point
    row["noise_allowance_s"] = allowance
    row["noisy"] = untouched_moves(info.touches, prev.get("breakdown") or {}, m.breakdown, allowance)
    budget = tp.memory_budget_bytes
    if name in ("batch", "checkpoint") and budget is not None:
        row["fits_budget"] = m.peak_bytes <= budget
        if not row["fits_budget"] and verdict == "adopted":
            verdict = "kept out"
    if not row["parity_ok"]:
        verdict = "broke parity"
    row["verdict"] = verdict
    row["adopted"] = verdict == "adopted"
    row["explain"] = explain(name, row, prev, device)
    return row


def _ms(s: float) -> str:
    return f"{s * 1e3:,.1f} ms"


def explain(name: str, row: dict[str, Any], prev: dict[str, Any] | None, device: torch.device) -> str:
    """What the rung did here, in sentences computed from the measured rows: its verdict with the
    interval and the threshold, how the category it attacks moved (and, where that category was too
    small to matter, the most any change to it could have given), and whether a category the rung
    does not touch moved beyond the stated noise (the machine was noisy)."""
    from perflab.core.readout import percent
    from perflab.tune.verdict import Interval, max_gain_from
    from perflab.tune.waterfall import LABELS

    bd = row.get("breakdown") or {}
    if prev is None:
        top = max(bd, key=lambda k: bd[k]) if bd else None
        return (f"the reference step; its largest category is {LABELS[top]} ({_ms(bd[top])}, "
                f"{percent(bd[top] / row['step_s'])} of the step)") if top else "the reference step"
    if not row["parity_ok"]:
        return (f"loss moved {row['loss_rel']:.1e} (relative), beyond the {row['tolerance']:.0e} tolerance of "
                f"{row['config']['dtype']}")
    lo, hi = row.get("interval") or (row["speedup_vs_previous"], row["speedup_vs_previous"])
    iv = Interval(row["speedup_vs_previous"], lo, hi, int(row.get("pairs") or 1), row.get("confidence", 0.9))
    bar = row.get("threshold", 1.02)
    v = row.get("verdict", "adopted" if row.get("adopted") else "kept out")
    if v == "adopted":
        s = f"adopted: {iv.text()}, the whole interval above {bar:.2f}×"
    elif v == "inconclusive":
        s = (f"inconclusive: {row['verdict_reason']}" if row.get("verdict_reason") else
             f"inconclusive: {iv.text()} still straddles {bar:.2f}× when the rung's time budget ended")
    elif row.get("fits_budget") is False:
        s = (f"kept out: {iv.text()}, but its peak ({row['peak_bytes'] / 2**20:,.1f} MiB) is over the memory "
             "budget")
    else:
        s = f"kept out: {iv.text()}, the whole interval below {bar:.2f}×"
    pb = prev.get("breakdown") or {}
    cat = ATTACKS.get(name)
    if cat and pb and bd:
        share = pb[cat] / prev["step_s"] if prev["step_s"] else 0.0
        s += f". {LABELS[cat].capitalize()}: {_ms(pb[cat])} ({percent(share)} of the step before) → {_ms(bd[cat])}"
        if v != "adopted" and max_gain_from(share) < bar:
            s += (f"; removing all of it could give at most {max_gain_from(share):.3f}×, below {bar:.2f}×, "
                  "so this rung cannot pay off here")
        if name == "loader" and v != "adopted":
            dc = bd.get("compute", 0.0) - pb.get("compute", 0.0)
            if dc > row.get("noise_allowance_s", 0.0):
                s += (f"; compute rose by {_ms(dc)} while the workers ran beside the step "
                      f"({_cores_note()})")
    if name == "bf16" and device.type == "cpu" and row.get("native_bf16") is False:
        s += ". No native bf16 on this CPU: every bf16 product is widened to fp32 and rounded back"
    noisy = row.get("noisy") or {}
    if noisy:
        moved = ", ".join(f"{LABELS[c]} {'+' if d > 0 else '−'}{_ms(abs(d))}" for c, d in noisy.items())
        s += (f". The machine was noisy: {moved}, though this rung does not touch "
              f"{'it' if len(noisy) == 1 else 'them'} (noise allowed: {_ms(row.get('noise_allowance_s', 0.0))})")
    return s


def _cores_note() -> str:
    from perflab.dataloading.loader import available_cores

    n = available_cores()
    return f"{n} core{'s' if n != 1 else ''} here"


def run_ladder(preset: str | TunePreset = "cpu", rungs: str | Sequence[str] | None = None, *, steps: int | None = None,
               batch: int | None = None, fresh: bool = False, device=None, path=None,
               progress: bool | Callable[[str], None] = False, profile: bool = True,
               budget_s: float | None = None) -> LadderResult:
    """Apply `rungs` (default: all, in the ladder's order) one after another and measure each,
    interleaved with the configuration it changes (`measure_pair`), until its verdict is decided or
    `budget_s` seconds (default: the preset's `rung_budget_s`) of timing are spent.

    steps: at least this many interleaved pairs per rung (default: the preset's). batch: the global
    batch in sequences (default: the preset's). A rung whose loss leaves the dtype's tolerance stops
    the ladder: `stopped` says which and by how much, and no later rung is measured.

    Every rung is saved as it is measured, keyed by the preset, the configuration it changes, its own
    configuration and the torch version, in `<results>/<host>/<device>/tune_<preset>.jsonl`: lesson 11,
    lab 11 and `perflab tune` read the same measurement of a rung, so they cannot disagree about it.
    `fresh=True` sets the file aside and measures everything again."""
    from pathlib import Path

    from perflab.core.device import describe, pick_device
    from perflab.core.results import run_sweep, sweep_path

    tp = tune_preset(preset) if isinstance(preset, str) else preset
    names = parse_rungs(rungs)
    min_pairs = max(tp.steps, positive_int("steps", steps)) if steps is not None else tp.steps
    if batch is not None:
        b = positive_int("batch", batch)
        if b % tp.micro_batch:
            raise InputError(f"--batch {b} is not a multiple of the baseline micro-batch {tp.micro_batch}: "
                             f"try {max(tp.micro_batch, b - b % tp.micro_batch)}")
        tp = replace(tp, global_batch=b)
    budget = tp.rung_budget_s if budget_s is None else float(budget_s)
    dev = torch.device(device) if device is not None else pick_device()
    info = describe(dev)
    p = Path(path) if path is not None else sweep_path(f"tune_{tp.name}", info.slug)
    if fresh and p.exists():
        p.rename(p.with_name(f"{p.stem}.{time.strftime('%Y%m%d-%H%M%S')}.jsonl"))
    say = _progress_printer(progress)
    bases: dict[str, Basis] = {}
    remeasured: set[str] = set()  # --fresh measures each dtype's ceiling again once (a new version)

    rows: list[dict[str, Any]] = []
    sc = StepConfig(micro_batch=tp.micro_batch)
    base: dict | None = None
    prev: dict | None = None  # the row of the configuration the next rung builds on
    stopped = None
    res_meas = res_skip = 0
    for i, name in enumerate(names):
        change = apply_rung(name, sc, tp, dev, rows)
        params = {"preset": tp.name, "model": tp.cfg.name, "global_batch": tp.global_batch, "warmup": tp.warmup,
                  "parity_step": parity_index(tp) + 1, "rung": name, "torch": torch.__version__,
                  "prev_config": None if prev is None else prev["config"], "config": change.config.as_dict(),
                  "applicable": change.applicable, "waterfall": bool(profile), "method": "interleaved blocks, watched"}

        def one(_p, i=i, name=name, change=change, prev=prev, base=base):
            if not change.applicable and prev is not None:
                return _row_from(name, change, None, prev, base, None, tp, dev)
            if say:
                say(f"[{i + 1}/{len(names)}] {name}: {rung_of(name).title} …")
            dt = change.config.dtype
            r = bases.get(dt) if not (fresh and dt not in remeasured) else None
            if r is None:  # the one rule every MFU shares (perflab.flops.mfu.mfu_basis), once per dtype
                r = bases[dt] = mfu_basis(dev, dt, remeasure=fresh and dt not in remeasured)
            remeasured.add(dt)
            with _quiet_compile():
                if prev is None:
                    m = measure_config(tp, change.config, steps=max(min_pairs, tp.steps), warmup=tp.warmup,
                                       device=dev, profile=profile, progress=None)
                    return _row_from(name, change, m, None, None, r, tp, dev)
                pm = measure_pair(tp, StepConfig(**prev["config"]), change.config, min_pairs=min_pairs,
                                  warmup=tp.warmup, device=dev, budget_s=budget, profile=profile, progress=None)
            return _row_from(name, change, pm.candidate, prev, base, r, tp, dev, pm)

        res = run_sweep(f"tune_{tp.name}", [params], one, path=p, retry_failed=True, progress=False)
        if res.interrupted or not res.rows:
            stopped = "interrupted: run the same command again to resume"
            break
        row = res.rows[0]
        res_meas += res.measured
        res_skip += res.skipped
        if row.get("status") != "ok":
            raise PerflabError(f"rung {name!r} failed: {row.get('reason')}")
        row = {k: v for k, v in row.items() if k not in ("params",)}
        rows.append(row)
        if say:
            state = row.get("verdict", "")
            say(f"[{i + 1}/{len(names)}] {name}: {state}"
                + (f" (resumed from {p.name})" if res.skipped else "")
                + (f", {row['speedup_vs_previous']:.2f}× the step before" if i else ""))
        if base is None:
            base = row
        if row.get("measured") and not row.get("parity_ok"):
            stopped = (f"rung {name!r} broke parity: loss {row['loss']:.6g} vs the baseline's {base['loss']:.6g} "
                       f"(relative {row['loss_rel']:.1e} > tolerance {row['tolerance']:.0e} for {row['config']['dtype']}); "
                       "the ladder stops here: find what changed the model before going on")
            break
        if row.get("adopted") or prev is None:
            prev = row
            sc = StepConfig(**row["config"])
    if say and not stopped:
        say(f"[{len(names)}/{len(names)}] done: {len(rows)} rung(s), {res_meas} measured, {res_skip} resumed")
    return LadderResult(tp.name, info.name, rows, stopped, str(p), res_meas, res_skip)


DRIFT_LIMIT = 1.25  # separate runs that disagree with the paired ratios by more than this factor: the machine drifted


def drift_note(rows: Sequence[dict[str, Any]], limit: float = DRIFT_LIMIT) -> str:
    """One sentence on whether the step times of separate rows can be compared: each row's `step_s`
    comes from its own run, its speed-ups from pairs timed together. Where the baseline's step ÷ a
    row's step differs from the row's paired speed-up by more than `limit`×, the machine's speed
    changed between the runs, and the sentence names the rows."""
    if not rows:
        return ""
    base = rows[0]
    off = []
    for r in rows[1:]:
        if not r.get("measured") or not r.get("step_s"):
            continue
        sep = base["step_s"] / r["step_s"]
        paired = float(r.get("speedup_vs_baseline") or 1.0)
        if max(sep / paired, paired / sep) > limit:
            off.append(f"{r['rung']} ({sep:.2f}× from separate runs, {paired:.2f}× from pairs)")
    if not off:
        return (f"The step times of separate rows agree with the paired speed-ups within {limit:.2f}×: the "
                "machine's speed held steady during the ladder.")
    return ("The machine's speed drifted during the ladder: compare rows by their speed-ups (timed in pairs), "
            f"not by their step times (each from its own run). Beyond {limit:.2f}×: " + "; ".join(off) + ".")


def _pct(f: float | None) -> str:
    from perflab.core.readout import percent

    if f is None:
        return "unknown"
    return percent(f) if f <= 1.0 else f"{percent(f)}: over its basis"


def _conf(rows) -> str:
    c = next((r.get("confidence") for r in rows if r.get("confidence")), 0.9)
    return f"{c * 100:.0f} %"


def _progress_printer(progress: bool | Callable[[str], None]) -> Callable[[str], None] | None:
    """A callable that reports progress: the one given, stderr for True, None for False."""
    if callable(progress):
        return progress
    if not progress:
        return None
    import sys

    def to_stderr(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    return to_stderr


@contextlib.contextmanager
def _quiet_compile():
    """torch.compile's and the DataLoader's warnings are the lesson's to explain, not noise to print."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
