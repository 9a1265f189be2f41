"""`perflab audit --trace DIR`: a whole job read from its ranks' profiler traces.

    >>> from perflab.audit.trace import audit_traces
    >>> rep = audit_traces("traces/")           # what tensorboard_trace_handler wrote on each rank
    >>> rep.ranks[0].shares, rep.stragglers.verdict
    >>> print(rep.summary())                    # rep.to_json(): exactly JOB_FIELDS (each rank's: RANK_FIELDS)

The report's types, its JSON and its text are `perflab.audit.job`'s (re-exported here).

The folder holds one profiling cycle of one job: one Chrome trace per rank (`.json`, `.json.gz`,
`.pt.trace.json`), the rank read from the trace's `distributedInfo` (`perflab.audit.rank_trace`). Per rank:

* **step time**: the `ProfilerStep#N` ranges (`prof.step()`) on the host;
* **where the device's time goes** and **the idle split**, as HolisticTraceAnalysis defines them in its
  temporal and idle-time breakdowns (`perflab.audit.hta`). Like HTA, when the job has two or more
  `ProfilerStep`s the steps analysed are those before the last one (HTA leaves it out: it may be cut
  short), and only the GPU events that host events of those steps launched count;
* **exposed communication** per step: the time communication kernels run while no compute kernel
  does (the collective time that overlap with compute did not hide).

Across ranks (`perflab.audit.stragglers`): **stragglers** by the robust z-score of their median step and
compute time, and the **waits in collectives** each rank cost the others. **MFU** when the model's FLOPs
per step are given (`mfu_of`): FLOPs per step ÷ (step time × GPUs × the dense peak of the GPU the traces
name, from perflab's hardware table), through `perflab.flops.mfu.utilization`. An unknown GPU gives
"peak unknown", never another chip's figure.

A CPU-only trace (gloo ranks, as the lessons run here) has no GPU events: the device is then perflab's
CPU notion (the main thread's outermost compute ops), and there is no idle split (HTA defines it on GPU
kernels only).

Bad input (no traces, traces of different jobs, ranks that profiled different steps) raises
`InputError` with one line saying what to change.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from perflab.audit.hta import (
    IDLE_KINDS,
    KERNEL_WAIT_US,
    SHARES,
    Temporal,
    idle_breakdown,
    per_step,
    ratios,
    temporal,
)
from perflab.audit.job import JOB_FIELDS, RANK_FIELDS, JobMfu, JobReport, RankFigures, render, table
from perflab.audit.rank_trace import (
    RankTrace,
    hta_filter,
    length,
    merge,
    overlap,
    read_rank,
    steps_text,
)
from perflab.audit.stragglers import collective_waits, stragglers
from perflab.core.errors import InputError
from perflab.profiling.trace import read_raw, trace_files

if TYPE_CHECKING:
    from perflab.audit.target import Target

__all__ = ["JOB_FIELDS", "RANK_FIELDS", "JobMfu", "JobReport", "RankFigures", "audit_traces", "load_job",
           "mfu_of", "model_flops_per_token", "rank_figures", "render", "table"]

def load_job(folder: str | Path) -> list[RankTrace]:
    """Every rank's trace in `folder`, checked to be one profiling cycle of one job (one line otherwise)."""
    files = trace_files(folder)
    ranks = [read_rank(f, read_raw(f), only_one=len(files) == 1) for f in files]
    seen: dict[int, Path] = {}
    for r in ranks:
        if r.rank in seen:
            raise InputError(f"rank {r.rank} has two traces ({seen[r.rank].name}, {r.path.name}): give a folder with one "
                             "profiling cycle of one job (tensorboard_trace_handler writes a file per rank and cycle)")
        seen[r.rank] = r.path
    worlds = {r.world_size for r in ranks if r.world_size}
    if len(worlds) > 1:
        raise InputError(f"traces from different jobs: world sizes {sorted(worlds)} in one folder; give one job's traces")
    if worlds and max(r.rank for r in ranks) >= next(iter(worlds)):
        raise InputError(f"traces from different jobs: a rank {max(r.rank for r in ranks)} in a world of "
                         f"{next(iter(worlds))}; give one job's traces")
    if len(ranks) > 1:
        lo = max(r.span[0] for r in ranks)
        hi = min(r.span[1] for r in ranks)
        if lo > hi:
            raise InputError("traces from different jobs: the ranks' profiled steps do not overlap in time; "
                             "give one profiling cycle of one job")
        first = ranks[0]
        for r in ranks[1:]:
            if r.on_gpu != first.on_gpu:
                g, c = (first, r) if first.on_gpu else (r, first)
                raise InputError(f"rank {g.rank}'s trace has GPU events and rank {c.rank}'s has none: profile every rank "
                                 "with the same activities (ProfilerActivity.CUDA on a GPU job)")
            if set(r.steps) != set(first.steps):
                raise InputError(f"ranks profiled different steps: rank {first.rank} has {steps_text(first.steps)}, "
                                 f"rank {r.rank} has {steps_text(r.steps)}; profile the same steps on every rank")
    return sorted(ranks, key=lambda r: r.rank)


def rank_figures(rt: RankTrace, step_names: int) -> RankFigures:
    """One rank's row: step times, shares (HTA's window), idle split, exposed communication per step."""
    steps = per_step(rt)
    split: dict[str, float] | None = None
    idle_ratio: dict[str, float | None] | None = None
    if rt.on_gpu:
        events = hta_filter(rt, step_names)
        rt.hta_gpu = events
        tb = temporal(events)
        by_stream = idle_breakdown(events, rt.launch_ts)
        split = {k: sum(s[k] for s in by_stream.values()) for k in IDLE_KINDS}
        idle_ratio = ratios(split)
        window_note = ("HTA's window (first to last GPU event launched before the last ProfilerStep)"
                       if step_names >= 2 else "HTA's window (first to last GPU event; one ProfilerStep)")
    else:
        lo = min(s for s, _ in rt.steps.values())
        hi = max(e for _, e in rt.steps.values())
        comp = merge([(max(s, lo), min(e, hi)) for s, e in rt.cpu_compute])
        comm = merge([(max(sp[0], lo), min(sp[1], hi)) for _, sp in rt.cpu_comm + rt.cpu_calls])
        c, k = length(comp), length(comm) - overlap(comm, comp)
        tb = Temporal((hi - lo) * 1e-6, c * 1e-6, k * 1e-6, 0.0, 0.0, (hi - lo - c - k) * 1e-6, k * 1e-6)
        by_stream = {}
        window_note = "all ProfilerSteps (a CPU trace: the device is the main thread's compute ops)"
    w = tb.window
    secs = tb.seconds()
    return RankFigures(
        rt.rank, rt.path.name, rt.device_name, rt.on_gpu, sorted(steps), {n: v.step_s for n, v in steps.items()},
        statistics.median(v.step_s for v in steps.values()), statistics.median(v.compute_s for v in steps.values()),
        {n: v.exposed_comm_s for n, v in steps.items()}, {n: v.comm_s for n, v in steps.items()},
        window_note, w, secs, {k: (secs[k] / w if w > 0 else None) for k in SHARES},
        tb.non_compute / w if w > 0 else None, idle_ratio, split, {str(s): v for s, v in by_stream.items()}, steps)


def mfu_of(job: JobReport, flops_per_step: float, *, dtype: str = "bf16",
           six_n_flops_per_step: float | None = None) -> JobMfu:
    """MFU of the job: model FLOPs per step (all ranks together) ÷ (step time × GPUs × dense peak of
    the GPU the traces name), as `perflab.flops.mfu.utilization` divides each GPU's share of the FLOPs
    by that peak (`Basis` 'spec peak'). Step time: the median over steps of the slowest rank's step."""
    from perflab.flops.mfu import Basis, resolve_peak, utilization

    if not flops_per_step > 0:
        raise InputError("the model's FLOPs per step must be positive")
    rows = job.ranks
    names = {r.device for r in rows}
    step_s = statistics.median(max(r.step_s[n] for r in rows) for n in rows[0].steps)
    gpus = job.world_size or len(rows)
    peak, source = None, ""
    if not rows[0].on_gpu:
        source = "peak unknown: CPU traces name no GPU"
    elif len(names) != 1 or None in names:
        source = ("peak unknown: the traces name no GPU (no deviceProperties)" if names == {None}
                  else f"peak unknown: the ranks name different GPUs ({', '.join(sorted(map(str, names)))})")
    else:
        try:  # the named GPU's dense datasheet peak, never another chip's
            peak, source = resolve_peak(None, str(next(iter(names))), dtype)
        except InputError as e:
            source = f"peak unknown: {e}"
    if peak and step_s <= 0:
        peak, source = None, "no MFU: the traces' steps have no length"
    if not peak:
        return JobMfu(flops_per_step, six_n_flops_per_step, dtype, step_s, gpus, None, None, None, source)
    bases = {dtype: Basis(tflops=peak, kind="spec peak", dtype=dtype, what=source)}
    u = utilization(step_s, {dtype: flops_per_step / gpus}, bases)
    six = utilization(step_s, {dtype: six_n_flops_per_step / gpus}, bases).mfu if six_n_flops_per_step else None
    return JobMfu(flops_per_step, six_n_flops_per_step, dtype, step_s, gpus, peak, u.mfu, six, source, u.suspect)


def audit_traces(folder: str | Path, *, flops_per_step: float | None = None, six_n_flops_per_step: float | None = None,
                 dtype: str = "bf16") -> JobReport:
    """The job audit of a folder of per-rank traces (see the module docstring); MFU when FLOPs per step are given."""
    ranks = load_job(folder)
    step_names = len(set().union(*(set(r.steps) for r in ranks)))
    rows = [rank_figures(r, step_names) for r in ranks]
    worlds = {r.world_size for r in ranks if r.world_size}
    world = worlds.pop() if worlds else None
    strag = stragglers({r.rank: r.step_s_median for r in rows}, {r.rank: r.compute_s_median for r in rows})
    waits = collective_waits({r.rank: r.per_step for r in rows}, {r.rank: r.clock_offset_us for r in ranks})
    notes = []
    if world and world > len(rows):
        notes.append(f"{len(rows)} of the job's {world} ranks are in the folder: stragglers and waits are among these")
    if len(ranks) == 1 and ranks[0].world_size is None:
        notes.append("one trace with no distributedInfo: read as rank 0 of a one-process job")
    job = JobReport(str(folder), world, len(rows), rows[0].steps, rows[0].on_gpu, rows, strag, waits, KERNEL_WAIT_US,
                    None, notes)
    if flops_per_step is not None:
        job.mfu = mfu_of(job, flops_per_step, dtype=dtype, six_n_flops_per_step=six_n_flops_per_step)
    return job


def model_flops_per_token(target: Target) -> tuple[float, float | None]:
    """(counted model FLOPs per token, 6N FLOPs per token) of one training step of an audit `Target`
    (`perflab.audit.target`), counted by perflab's FLOP counter on its first batch on this machine's CPU."""
    import torch

    from perflab.audit.target import AuditInputError, BatchSource, default_loss, tokens_in
    from perflab.audit.work import count_params
    from perflab.flops.counter import count_flops

    batch = BatchSource(target.batches).next()
    tokens = tokens_in(batch, target.tokens_per_batch)
    if not tokens:
        raise AuditInputError("the model's batches hold no token count: give 'tokens_per_batch' in the factory, "
                              "so that FLOPs per token (and MFU) can be known")
    loss_fn = target.loss_fn or default_loss
    model = target.model.to("cpu").train()

    def step(b):
        loss = loss_fn(model, b)
        loss.backward()
        return loss

    with torch.random.fork_rng():
        fc = count_flops(step, batch)
    _, active, _ = count_params(model, target.hf_config)
    return fc.model / tokens, 6.0 * active
