"""One configuration of lesson 11's step measured: alone (`measure_config`), or interleaved with the
configuration it changes (`measure_pair`), each with its peak memory and its waterfall.

    >>> m = measure_config(tp, StepConfig(), steps=5, warmup=1, device=dev)
    >>> m.step_s, m.peak_bytes, m.breakdown              # median wall seconds, bytes, seconds per category
    >>> pm = measure_pair(tp, prev, cand, min_pairs=6, warmup=1, device=dev, budget_s=20)
    >>> pm.verdict, pm.interval.text()

An `Arm` is one configuration ready to step: its model, optimizer, training step
(`perflab.workload.train.StepRunner`), loader of slow token ids (`perflab.workload.data.SlowTokens`)
and CPU binding, built from the same weights and data as every other configuration, so step i of any
configuration trains on the same sequences. A step's wall time includes its wait for data.

Peak memory: on a GPU the caching allocator's `max_memory_allocated` over the run; on a CPU the weights,
AdamW's states and the batches plus the rise a step's allocations make (`perflab.memory.probe.allocated_during`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from perflab.core.errors import InputError
from perflab.tune.config import (
    StepConfig,
    bound_to,
    build,
    make_loader,
    numa_cpus,
    optimizer_for,
    padded_vocab,
    step_runner,
)
from perflab.tune.ladder import TunePreset
from perflab.tune.verdict import Interval, Verdict
from perflab.workload.data import SlowTokens
from perflab.workload.train import StepTimes


@dataclass
class Measurement:
    """One configuration's figures: medians of its timed steps (seconds), its peak memory and how it
    was read, its losses after every step, its FLOPs per step and its waterfall."""

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


def static_bytes(model: torch.nn.Module, opt: torch.optim.Optimizer) -> int:
    """Bytes of the weights and the optimizer's states (what a CPU step's allocation events do not see)."""
    n = sum(p.numel() * p.element_size() for p in model.parameters())
    for st in opt.state.values():
        n += sum(v.numel() * v.element_size() for v in st.values() if torch.is_tensor(v))
    return n


class Arm:
    """One configuration ready to step: its model, optimizer, loader and CPU binding, built from the
    same weights and data as every other configuration (so step i trains on the same sequences)."""

    def __init__(self, tp: TunePreset, sc: StepConfig, device: torch.device, n_steps: int):
        cfg, G, mb = tp.cfg, tp.global_batch, sc.micro_batch
        if G % mb:
            raise InputError(f"micro-batch {mb} does not divide the global batch {G}: choose a divisor of {G}")
        self.tp, self.sc, self.device, self.gas = tp, sc, device, G // mb
        self.cpus = numa_cpus(sc)
        ds = SlowTokens(G * n_steps, tp.seq, cfg.vocab, tp.io_ms / 1e3)
        with bound_to(self.cpus):
            self.model = build(cfg, sc, device)
            self.opt = optimizer_for(self.model, sc)
            self.runner = step_runner(self.model, self.opt, sc, cfg, self.gas, device)
            self.it = iter(make_loader(ds, sc, device))
        self.nb = sc.pin_memory and device.type == "cuda"
        self.losses: list[float] = []
        self.walls: list[float] = []  # every step's wall time, warmup included
        self.datas: list[float] = []
        self.times: list[StepTimes] = []

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
        t = self.runner.step(mbs)
        return data_s, t, self.runner.mean_loss()

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

                base = static_bytes(self.model, self.opt) + 2 * tp.global_batch // self.gas * tp.seq * 8 * 2
                rise = allocated_during(self.one_step, device)["peak_bytes"]  # its profiler's notes stay off stderr
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

    arm = Arm(tp, sc, device, warmup + steps + 2)  # + one for memory, + one profiled
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
    interval: Interval
    verdict: str  # 'adopted', 'kept out' or 'inconclusive' (parity and budget are checked after)
    timed_s: float  # seconds the interleaved timing took
    decision: Verdict | None = None  # why, its blocks and their quietness
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
    a, b = Arm(tp, prev, device, n_steps), Arm(tp, cand, device, n_steps)
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
