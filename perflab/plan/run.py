"""`plan(...)`: will the job fit, how fast will it be, what should it recompute, before renting the GPUs.

    >>> from perflab.plan.run import plan
    >>> p = plan(lambda: from_hf_config("llama", {...}, batch=1, seq=8192), gpu="h100", gpus=64, fsdp=True)
    >>> p.fits, p.parts, p.step_s, p.mfu
    >>> print(p.text()); p.to_json()

* **Fits** when the tracked peak is at most the GPU's memory less `headroom` (default 10 %, a
  margin chosen here for what no tracker sees: the CUDA context, NCCL's buffers, the caching
  allocator's fragmentation). Memory is in GB (1e9 bytes), as the datasheets print it.
* **Tokens/s** = tokens per GPU per step × GPUs ÷ tensor-parallel degree ÷ step time (the tensor-parallel
  ranks of a group share one micro-batch).
* **MFU** = model FLOPs per step (forward + backward, recompute excluded; all ranks) ÷ (step time ×
  GPUs × the GPU's dense peak in the training dtype) — lesson 02's definition, divided where every MFU
  is (`perflab.flops.mfu.utilization`, per GPU). With the roofline's ideal kernels it is an upper bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON
from perflab.plan.cost import Cluster, Event, Replay, cluster, replay
from perflab.plan.step import Layout, StepTrace, run_step

HEADROOM = 0.10


@dataclass
class Plan:
    layout: Layout
    cluster: Cluster
    name: str
    parts: dict[str, int]
    peak_bytes: int
    usable_bytes: float
    headroom: float
    step: Replay
    flops: dict[str, float]
    tokens_per_gpu: int | None
    params_total: int
    recompute: list[dict[str, Any]] = field(default_factory=list)  # the --ac auto policy, op by op
    extra_recompute_s: float = 0.0
    suggestions: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.usable_bytes

    @property
    def tokens_per_s(self) -> float | None:
        if not self.tokens_per_gpu or self.step.step_s <= 0:
            return None
        return self.tokens_per_gpu * self.layout.dp / self.step.step_s

    @property
    def mfu(self) -> float | None:
        """One GPU's model FLOPs per step over the step time at the GPU's dense peak in the training dtype
        (`perflab.flops.mfu.utilization`); None when the peak is unknown (or the MFU would pass 100 %)."""
        from perflab.flops.mfu import spec_basis, utilization

        dt = self.layout.dtype
        peak = self.cluster.peak(dt)
        if not peak or self.step.step_s <= 0:
            return None
        basis = spec_basis(peak, dt, self.cluster.peak_source(dt))
        return utilization(self.step.step_s, {dt: self.flops["forward"] + self.flops["backward"]}, {dt: basis}).mfu

    def to_json(self) -> JSON:
        return {"model": self.name, "layout": asdict(self.layout), "cluster": self.cluster.as_dict(),
                "params_total": self.params_total, "memory_bytes": dict(self.parts), "peak_bytes": self.peak_bytes,
                "usable_bytes": self.usable_bytes, "headroom": self.headroom, "fits": self.fits,
                "step_s": self.step.step_s, "compute_s": self.step.compute_s, "comm_s": self.step.comm_s,
                "comm_hidden_s": self.step.hidden_s, "comm_exposed_s": self.step.exposed_s,
                "flops_per_gpu": dict(self.flops), "tokens_per_gpu_step": self.tokens_per_gpu,
                "tokens_per_s": self.tokens_per_s, "mfu": self.mfu, "recompute": self.recompute,
                "extra_recompute_s": self.extra_recompute_s, "suggestions": self.suggestions, "notes": self.notes}

    def table(self):
        """Per-GPU memory by part, then the step's time, as two-column rows."""
        import pandas as pd

        from perflab.core.readout import num, percent, seconds

        gb = _gb
        rows = [(f"memory: {k}", gb(v)) for k, v in self.parts.items()]
        rows += [("memory: peak", gb(self.peak_bytes)),
                 (f"memory: usable ({self.cluster.memory_bytes / 1e9:.0f} GB less {self.headroom:.0%})"
                  if self.usable_bytes == self.cluster.memory_bytes * (1 - self.headroom) else "memory: budget",
                  gb(self.usable_bytes)),
                 ("fits", "yes" if self.fits else f"no: {gb(self.peak_bytes - self.usable_bytes)} over"),
                 ("step: compute", seconds(self.step.compute_s)), ("step: communication", seconds(self.step.comm_s)),
                 ("step: communication hidden", seconds(self.step.hidden_s)),
                 ("step: communication exposed", seconds(self.step.exposed_s)), ("step: time", seconds(self.step.step_s)),
                 ("tokens/s (whole job)", num(self.tokens_per_s) if self.tokens_per_s else "unknown (no tokens)"),
                 ("MFU (roofline bound)", percent(self.mfu) if self.mfu is not None else "peak unknown")]
        return pd.DataFrame(rows, columns=["quantity", "per GPU"]).set_index("quantity")

    def text(self) -> str:
        lay = self.layout
        head = (f"{self.name} on {lay.gpus} × {self.cluster.gpu_name}: tp {lay.tp}, dp {lay.dp}"
                f"{' (FSDP2)' if lay.fsdp else ''}, {lay.dtype}, recompute {lay.ac}")
        lines = [head] + [f"  {k:<34} {v}" for k, v in self.table()["per GPU"].items()]
        if self.recompute:
            lines.append("  recompute, op by op (greedy order of torch's SAC estimator):")
            lines += [f"    {r['op']}: frees {r['bytes_per_block'] / 1e6:.3g} MB per block, costs "
                      f"{r['seconds_per_block'] * 1e6:.3g} µs per block" for r in self.recompute]
        lines += [f"  try: {s}" for s in self.suggestions] + [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _gb(b: float) -> str:
    """Bytes in GB (1e9) or, below 1 GB, MB (1e6), three significant digits."""
    return f"{b / 1e9:.3g} GB" if abs(b) >= 1e9 else f"{b / 1e6:.3g} MB"


def _one(make_target, layout: Layout, c: Cluster, headroom: float, recompute=None,
         budget: float | None = None) -> tuple[StepTrace, Plan]:
    tr = run_step(make_target, layout, c, recompute)
    events = list(tr.events)
    if layout.dp > 1 and not layout.fsdp:
        from perflab.plan.cost import collective_seconds

        grad_bytes = tr.parts["gradients"]
        events.append(Event("all_reduce", collective_seconds("all_reduce", grad_bytes, layout.dp,
                                                             c.busbw_gbps(layout.dp, layout.tp)),
                            overlap=False, nbytes=grad_bytes, group=layout.dp))
        tr.notes.append("DDP's gradient all-reduce is counted as exposed (its buckets overlap the backward in a real "
                        "run): an upper bound on the step")
    usable = c.memory_bytes * (1 - headroom) if budget is None else budget
    p = Plan(layout, c, tr.name, tr.parts, tr.peak_bytes, usable, headroom, replay(events),
             tr.flops, tr.tokens_per_gpu, tr.params_total, notes=tr.notes)
    return tr, p


def plan(make_target: Callable[[], Any], *, gpu: str = "h100", gpus: int = 8, tp: int = 1, fsdp: bool = False,
         ac: str = "none", dtype: str = "bf16", headroom: float = HEADROOM, budget_gb: float | None = None,
         suggest: bool = True) -> Plan:
    """Plan one training step of `make_target()` (an audit Target, built here on `meta`) on `gpus` GPUs.

    `budget_gb`: the memory a GPU may use (GB, 1e9 bytes), when it is less than the GPU's memory less
    `headroom` (a budget above that is refused: it would not fit the GPU)."""
    if not (isinstance(headroom, (int, float)) and 0 <= headroom < 1):
        raise InputError(f"--headroom must be a fraction in [0, 1) (got {headroom!r})")
    budget = None
    if budget_gb is not None:
        if isinstance(budget_gb, bool) or not isinstance(budget_gb, (int, float)) or not budget_gb > 0:
            raise InputError(f"--budget must be a positive number of GB (got {budget_gb!r})")
        budget = float(budget_gb) * 1e9
    c = cluster(gpu)
    if budget is not None and budget > c.memory_bytes * (1 - headroom):
        raise InputError(f"--budget {budget_gb:g} GB is more than the {c.gpu_name}'s {c.memory_bytes / 1e9:g} GB less "
                         f"{headroom:.0%} headroom ({c.memory_bytes * (1 - headroom) / 1e9:.3g} GB)")
    layout = Layout(gpus, tp, fsdp, dtype, ac)
    layout.check(c)
    if ac != "auto":
        _, p = _one(make_target, layout, c, headroom, budget=budget)
    else:
        p = _auto(make_target, layout, c, headroom, budget)
    if suggest and not p.fits:
        p.suggestions = _suggestions(make_target, p, c, headroom, budget)
    return p


def _auto(make_target, layout: Layout, c: Cluster, headroom: float, budget: float | None) -> Plan:
    from dataclasses import replace

    from perflab.plan.recompute import choose, greedy_order

    base_layout = replace(layout, ac="none")
    _, base = _one(make_target, base_layout, c, headroom, budget=budget)
    if base.fits:
        base.layout = layout
        base.notes.append("--ac auto: the step fits without recomputing anything")
        return base
    order, n_blocks = greedy_order(make_target, layout, c)
    need = base.peak_bytes - base.usable_bytes
    chosen = choose(order, need, n_blocks)
    p = base
    while chosen:
        _, p = _one(make_target, layout, c, headroom, frozenset(o.name for o in chosen), budget)
        if p.fits or len(chosen) == len(order):
            break
        chosen = order[: min(len(order), 2 * len(chosen))]  # twice as many: few re-plans on a long list
    p.layout = layout
    p.recompute = [{"op": o.name, "bytes_per_block": o.bytes_per_block, "seconds_per_block": o.seconds_per_block}
                   for o in chosen]
    if not p.fits:
        # what a selective policy keeps (the block's saved inputs of operators it does not list) can
        # exceed what checkpointing the whole block keeps: try that
        _, full = _one(make_target, replace(layout, ac="full"), c, headroom, budget=budget)
        if full.fits or full.peak_bytes < p.peak_bytes:
            full.layout = layout
            full.recompute = [{"op": "every operator of every block (full recompute)", "bytes_per_block": 0,
                               "seconds_per_block": 0.0}]
            full.notes.append("--ac auto: the operators torch's SAC estimator lists did not fit; recomputing "
                              "whole blocks does" if full.fits else "")
            p = full
    p.notes = [n for n in p.notes if n]
    p.extra_recompute_s = max(0.0, p.step.compute_s - base.step.compute_s)
    if not p.fits:
        p.notes.append("--ac auto: no recompute policy fits the budget")
    return p


def _suggestions(make_target, p: Plan, c: Cluster, headroom: float, budget: float | None) -> list[str]:
    """What to change, each planned: FSDP, then full recompute, then twice the tensor parallelism."""
    from dataclasses import replace

    lay = p.layout
    tries: list[tuple[str, Layout]] = []
    if not lay.fsdp and lay.dp > 1:
        tries.append(("--fsdp", replace(lay, fsdp=True)))
    if lay.ac == "none":
        tries.append(("--ac full", replace(lay, ac="full", fsdp=lay.fsdp or lay.dp > 1)))
    if lay.tp * 2 <= c.gpus_per_node and lay.gpus % (lay.tp * 2) == 0:
        tries.append((f"--tp {lay.tp * 2}", replace(lay, tp=lay.tp * 2)))
    out = []
    for flag, alt in tries:
        try:
            _, q = _one(make_target, alt, c, headroom, budget=budget)
        except InputError as e:
            out.append(f"{flag}: not possible ({e})")
            continue
        verdict = "fits" if q.fits else "still over"
        from perflab.core.readout import seconds
        out.append(f"{flag}: peak {_gb(q.peak_bytes)} ({verdict}), step {seconds(q.step.step_s)}")
    out.append("a smaller --micro-batch shrinks the activations in proportion (with gradient accumulation "
               "to keep the global batch)")
    return out



def preset_target(name: str, micro_batch: int = 1, seq: int | None = None):
    """A zero-argument builder of perflab's model `name` (a preset of perflab.workload) with a batch of
    `micro_batch` × `seq` tokens, for `plan` (built on `meta` there)."""
    from perflab.workload.models import preset

    cfg = preset(name)
    s = seq or cfg.seq_len

    def build():
        from perflab.audit.target import target_from
        from perflab.workload.models import build_model
        from perflab.workload.train import make_batches

        return target_from({"model": build_model(cfg, seed=None), "batches": make_batches(cfg, micro_batch, s)},
                           f"{cfg.name} (b {micro_batch}, s {s})")

    return build
