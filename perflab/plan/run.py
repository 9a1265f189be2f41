"""`plan(...)`: will the job fit, how fast will it be, what should it recompute, before renting the GPUs.

    >>> from perflab.plan.run import plan
    >>> p = plan(lambda: from_hf_config("llama", {...}, batch=1, seq=8192), gpu="h100", gpus=64, fsdp=True)
    >>> p.fits, p.parts, p.step_s, p.mfu
    >>> print(p.text()); p.to_json()

* **Fits** when the tracked peak is at most the GPU's memory less `headroom` (default 10 %, a
  margin chosen here for what no tracker sees: the CUDA context, NCCL's buffers, the caching
  allocator's fragmentation). Memory is in GB (1e9 bytes), as the datasheets print it.
* **Step time** is an estimate (`perflab.plan.cost`: every kernel on the roofline at the datasheet's
  figures, collectives at NCCL's bus bandwidth and latency), neither a lower nor an upper bound:
  `perflab.plan.compare` sets it beside published runs.
* **Tokens/s** = tokens per GPU per step × GPUs ÷ tensor-parallel degree ÷ step time (the tensor-parallel
  ranks of a group share one micro-batch).
* **MFU** = model FLOPs per step ÷ (step time × the GPU's dense peak in the training dtype), per GPU,
  divided where every MFU is (`perflab.flops.mfu.utilization`), under two conventions, each named:
  `mfu` counts attention whole (the masked half of a causal kernel as if computed: PaLM's, Megatron's and
  llm-foundry's formulas, and torch's FlopCounterMode), `mfu_causal` counts causal attention at half
  (FlashAttention-2 §4.1, whose benchmark divides by 2 when causal). Both leave out what is recomputed:
  activation checkpointing's second forward, and the scores Q·Kᵀ a FlashAttention backward recomputes
  (lesson 13): those are hardware FLOPs, not the model's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON
from perflab.plan.cost import Cluster, Replay, cluster
from perflab.plan.step import Layout, StepTrace

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
    causal_flops: dict[str, float] = field(default_factory=dict)  # model FLOPs of causal attention kernels
    saved: list[str] = field(default_factory=list)  # the --ac auto policy: the operators whose outputs it keeps
    phases: dict[str, dict[str, int]] = field(default_factory=dict)  # per-GPU bytes by part at each phase's peak

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.usable_bytes

    @property
    def tokens_per_s(self) -> float | None:
        if not self.tokens_per_gpu or self.step.step_s <= 0:
            return None
        return self.tokens_per_gpu * self.layout.dp / self.step.step_s

    @property
    def model_flops(self) -> float:
        """Model FLOPs per GPU per step, attention counted whole (forward + backward, recompute left out)."""
        return self.flops["forward"] + self.flops["backward"]

    @property
    def model_flops_causal(self) -> float:
        """Model FLOPs per GPU per step with causal attention counted at half (FlashAttention-2 §4.1)."""
        return self.model_flops - (self.causal_flops.get("forward", 0.0) + self.causal_flops.get("backward", 0.0)) / 2

    def _mfu(self, flops: float) -> float | None:
        from perflab.flops.mfu import spec_basis, utilization

        dt = self.layout.dtype
        peak = self.cluster.peak(dt)
        if not peak or self.step.step_s <= 0:
            return None
        basis = spec_basis(peak, dt, self.cluster.peak_source(dt))
        return utilization(self.step.step_s, {dt: flops}, {dt: basis}).mfu

    @property
    def mfu(self) -> float | None:
        """One GPU's model FLOPs per step (attention counted whole) over the step time at the GPU's dense peak
        in the training dtype (`perflab.flops.mfu.utilization`); None when the peak is unknown (or the MFU
        would pass 100 %)."""
        return self._mfu(self.model_flops)

    @property
    def mfu_causal(self) -> float | None:
        """`mfu` with causal attention counted at half (FlashAttention-2's convention)."""
        return self._mfu(self.model_flops_causal)

    def to_json(self) -> JSON:
        return {"model": self.name, "layout": asdict(self.layout), "cluster": self.cluster.as_dict(),
                "params_total": self.params_total, "memory_bytes": dict(self.parts), "peak_bytes": self.peak_bytes,
                "usable_bytes": self.usable_bytes, "headroom": self.headroom, "fits": self.fits,
                "step_s": self.step.step_s, "compute_s": self.step.compute_s, "comm_s": self.step.comm_s,
                "comm_hidden_s": self.step.hidden_s, "comm_exposed_s": self.step.exposed_s,
                "flops_per_gpu": dict(self.flops), "causal_attention_flops_per_gpu": dict(self.causal_flops),
                "tokens_per_gpu_step": self.tokens_per_gpu, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
                "mfu_causal_halved": self.mfu_causal, "recompute": self.recompute, "saved": self.saved,
                "extra_recompute_s": self.extra_recompute_s, "suggestions": self.suggestions, "notes": self.notes}

    def table(self):
        """Per-GPU memory by part, then the step's time, as two-column rows."""
        import pandas as pd

        from perflab.core.readout import percent, seconds

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
                 ("tokens/s (whole job)", rate(self.tokens_per_s) if self.tokens_per_s else "unknown (no tokens)"),
                 ("MFU, attention counted whole (estimate)", percent(self.mfu) if self.mfu is not None else "peak unknown"),
                 ("MFU, causal attention halved (estimate)",
                  percent(self.mfu_causal) if self.mfu_causal is not None else "peak unknown")]
        return pd.DataFrame(rows, columns=["quantity", "per GPU"]).set_index("quantity")

    def text(self) -> str:
        lay = self.layout
        head = (f"{self.name} on {lay.gpus} × {self.cluster.gpu_name}: tp {lay.tp}{' with sequence parallelism' if lay.sp else ''}"
                f", dp {lay.dp}{' (FSDP2)' if lay.fsdp else ''}, {lay.dtype}, recompute {lay.ac}\n"
                f"  cluster: {self.cluster.describe()}")
        lines = [head] + [f"  {k:<40} {v}" for k, v in self.table()["per GPU"].items()]
        if self.recompute:
            lines.append("  recompute, op by op (greedy order of torch's SAC estimator):")
            lines += [f"    {r['op']}: frees {_gb(r['bytes_per_block'])} per block, costs "
                      f"{_seconds(r['seconds_per_block'])} per block" for r in self.recompute]
        if self.saved:
            lines.append(f"  kept (their outputs saved): {', '.join(self.saved)}")
        lines += [f"  try: {s}" for s in self.suggestions] + [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass(frozen=True)
class Plans:
    """Several plans of one model, by label (layouts, or recompute policies), read side by side."""

    plans: dict[str, Plan]
    budget_bytes: float | None = None  # the budget the recompute view checks each plan against

    def table(self, view: str = "speed"):
        """`speed`: each plan's step (compute, communication hidden and exposed), tokens/s and MFU under both
        conventions; `recompute`: each plan's peak, whether it fits the budget, compute and extra compute."""
        import pandas as pd

        from perflab.core.readout import percent, seconds

        if view == "speed":
            rows = [{"layout": k, "step": seconds(p.step.step_s), "compute": seconds(p.step.compute_s),
                     "comm hidden": seconds(p.step.hidden_s), "comm exposed": seconds(p.step.exposed_s),
                     "tokens/s (job)": rate(p.tokens_per_s), "MFU, attention whole": percent(p.mfu),
                     "MFU, causal halved": percent(p.mfu_causal)} for k, p in self.plans.items()]
            return pd.DataFrame(rows).set_index("layout")
        if view == "recompute":
            first = next(iter(self.plans.values()))
            budget = self.budget_bytes if self.budget_bytes is not None else first.usable_bytes
            rows = [{"recompute": k, "peak per GPU": _gb(p.peak_bytes), "fits the budget": "yes" if p.peak_bytes <= budget
                     else "no", "compute": seconds(p.step.compute_s),
                     "extra compute": seconds(p.step.compute_s - first.step.compute_s)} for k, p in self.plans.items()]
            return pd.DataFrame(rows).set_index("recompute")
        raise InputError(f"view {view!r}: use 'speed' or 'recompute'")

    def scaling(self) -> str:
        """From the first plan to the last (more GPUs): how the communication per GPU and the MFU moved, in words."""
        from perflab.core.readout import num, percent, seconds

        a, b = next(iter(self.plans.values())), list(self.plans.values())[-1]
        grew = b.step.comm_s / a.step.comm_s if a.step.comm_s > 0 else float("nan")
        hidden = b.step.exposed_s <= 0.05 * b.step.step_s
        return (f"from {a.layout.gpus} to {b.layout.gpus} GPUs the communication per GPU grew {num(grew)}× "
                f"({seconds(a.step.comm_s)} → {seconds(b.step.comm_s)}); "
                + (f"it stays hidden behind {seconds(b.step.compute_s)} of compute ({seconds(b.step.exposed_s)} exposed), "
                   if hidden else f"{seconds(b.step.exposed_s)} of it is exposed, ")
                + f"and the MFU moves from {percent(a.mfu)} to {percent(b.mfu)}")


def policy_text(auto: Plan, full: Plan, none: Plan) -> str:
    """What `--ac auto` chose, in words: what it recomputes and keeps, and its extra compute beside full
    recompute's (each against `none`, the step without recompute)."""
    from perflab.core.readout import seconds

    extra, full_extra = auto.step.compute_s - none.step.compute_s, full.step.compute_s - none.step.compute_s
    if not auto.recompute:
        return "nothing is recomputed: the step fits without"
    if not auto.saved:
        return f"every block is recomputed whole: {seconds(extra)} of extra compute per step, as full recompute costs"
    names = ", ".join(r["op"] for r in auto.recompute)
    return (f"recompute {names}; keep the outputs of {', '.join(auto.saved)}: {seconds(extra)} of extra compute per "
            f"step, {extra / full_extra:.0%} of full recompute's {seconds(full_extra)}")


def _seconds(s: float) -> str:
    from perflab.core.readout import seconds

    return seconds(s)


def _gb(b: float) -> str:
    """Bytes in GB (1e9) or, below 1 GB, MB (1e6), three significant digits."""
    return f"{b / 1e9:.3g} GB" if abs(b) >= 1e9 else f"{b / 1e6:.3g} MB"


def rate(x: float | None) -> str:
    """A rate of tokens a person reads: '11.6 million', '7,710'."""
    from perflab.core.readout import num

    if x is None:
        return "–"
    return f"{num(x / 1e6)} million" if abs(x) >= 1e6 else num(x)


def _one(make_target, layout: Layout, c: Cluster, headroom: float, recompute=None,
         budget: float | None = None, whole: bool = False) -> tuple[StepTrace, Plan]:
    from perflab.plan.scale import traced

    tr = traced(make_target, layout, c, recompute, whole)
    timeline = tr.timeline or Replay(0.0, 0.0, 0.0, 0.0)
    notes = list(tr.notes)
    if layout.dp > 1 and not layout.fsdp:
        from perflab.plan.cost import collective_seconds

        grad_bytes = tr.phases.get("optimizer", tr.parts)["gradients"]  # every gradient, as the step has them
        t = collective_seconds("all_reduce", grad_bytes, layout.dp, c.busbw_gbps(layout.dp, layout.tp),
                               c.latency_s("all_reduce", layout.dp, layout.tp))
        timeline = Replay(timeline.step_s + t, timeline.compute_s, timeline.comm_s + t, timeline.exposed_s + t)
        notes.append("DDP's gradient all-reduce is counted as exposed (its buckets overlap the backward in a real "
                     "run): an upper bound on the step")
    usable = c.memory_bytes * (1 - headroom) if budget is None else budget
    p = Plan(layout, c, tr.name, tr.parts, tr.peak_bytes, usable, headroom, timeline, tr.flops, tr.tokens_per_gpu,
             tr.params_total, notes=notes, causal_flops=dict(tr.causal_flops), phases=dict(tr.phases))
    return tr, p


def plan(make_target: Callable[[], Any], *, gpu: str = "h100", gpus: int = 8, tp: int = 1, fsdp: bool = False,
         ac: str = "none", dtype: str = "bf16", headroom: float = HEADROOM, budget_gb: float | None = None,
         suggest: bool = True, sp: bool = False, gpus_per_node: int | None = None, nics_per_node: int | None = None,
         nic: str | float | None = None, whole: bool = False) -> Plan:
    """Plan one training step of `make_target()` (an audit Target, built here on `meta`) on `gpus` GPUs.

    `budget_gb`: the memory a GPU may use (GB, 1e9 bytes), when it is less than the GPU's memory less
    `headroom` (a budget above that is refused: it would not fit the GPU). `sp`: sequence and loss
    parallelism with `tp` (`perflab.plan.tp`). `gpus_per_node`, `nics_per_node`, `nic`: the cluster's
    nodes, when they are not a DGX's (`perflab.plan.cluster`). `whole`: trace every block, not two depths
    (`perflab.plan.scale`)."""
    if not (isinstance(headroom, (int, float)) and 0 <= headroom < 1):
        raise InputError(f"--headroom must be a fraction in [0, 1) (got {headroom!r})")
    budget = None
    if budget_gb is not None:
        if isinstance(budget_gb, bool) or not isinstance(budget_gb, (int, float)) or not budget_gb > 0:
            raise InputError(f"--budget must be a positive number of GB (got {budget_gb!r})")
        budget = float(budget_gb) * 1e9
    c = cluster(gpu, gpus_per_node=gpus_per_node, nics_per_node=nics_per_node, nic=nic)
    if budget is not None and budget > c.memory_bytes * (1 - headroom):
        raise InputError(f"--budget {budget_gb:g} GB is more than the {c.gpu_name}'s {c.memory_bytes / 1e9:g} GB less "
                         f"{headroom:.0%} headroom ({c.memory_bytes * (1 - headroom) / 1e9:.3g} GB)")
    layout = Layout(gpus, tp, fsdp, dtype, ac, sp)
    layout.check(c)
    if ac != "auto":
        _, p = _one(make_target, layout, c, headroom, budget=budget, whole=whole)
    else:
        p = _auto(make_target, layout, c, headroom, budget, whole)
    if suggest and not p.fits:
        p.suggestions = _suggestions(make_target, p, c, headroom, budget, whole)
    return p


def _auto(make_target, layout: Layout, c: Cluster, headroom: float, budget: float | None, whole: bool) -> Plan:
    """--ac auto (perflab.plan.recompute): no recompute when it fits; else the selective policy that saves the
    most time-costly operators the room above full recompute holds, checked by the tracker; else full."""
    from perflab.plan.recompute import choose, greedy_order, need_for_room

    _, base = _one(make_target, replace(layout, ac="none"), c, headroom, budget=budget, whole=whole)
    if base.fits:
        base.layout = layout
        base.notes.append("--ac auto: the step fits without recomputing anything")
        return base
    _, full = _one(make_target, replace(layout, ac="full"), c, headroom, budget=budget, whole=whole)
    full.layout = layout
    full.recompute = [{"op": "every operator of every block (full recompute)", "bytes_per_block": 0,
                       "seconds_per_block": 0.0}]
    full.extra_recompute_s = max(0.0, full.step.compute_s - base.step.compute_s)
    if not full.fits:
        full.notes.append("--ac auto: no recompute policy fits the budget, not even full recompute")
        return full
    order, n_blocks = greedy_order(make_target, layout, c)
    # a policy changes what the forward and backward keep, not the optimizer's step: the room is the budget
    # less full recompute's peak while the step computes
    step_peak = sum(full.phases["step"].values()) if "step" in full.phases else full.peak_bytes
    chosen = choose(order, need_for_room(order, full.usable_bytes - step_peak, n_blocks), n_blocks)
    while len(chosen) < len(order):
        _, p = _one(make_target, layout, c, headroom, frozenset(o.name for o in chosen), budget, whole)
        if p.fits:
            p.layout = layout
            p.recompute = [{"op": o.name, "bytes_per_block": o.bytes_per_block, "seconds_per_block": o.seconds_per_block}
                           for o in chosen]
            p.saved = [o.name for o in order[len(chosen):]]
            p.extra_recompute_s = max(0.0, p.step.compute_s - base.step.compute_s)
            return p
        chosen = order[: len(chosen) + 1]  # the tracker says over: save one operator fewer
    full.notes.append("--ac auto: no selection of operators fits the budget; recomputing whole blocks does")
    return full


def _suggestions(make_target, p: Plan, c: Cluster, headroom: float, budget: float | None, whole: bool) -> list[str]:
    """What to change, each planned: FSDP, full recompute, twice the GPUs with FSDP, twice the tensor
    parallelism. A change the plan cannot make says why, in one line."""
    lay = p.layout
    tries: list[tuple[str, Layout]] = []
    if not lay.fsdp and lay.dp > 1:
        tries.append(("--fsdp", replace(lay, fsdp=True)))
    if lay.ac == "none":
        tries.append(("--ac full", replace(lay, ac="full", fsdp=lay.fsdp or lay.dp > 1)))
    if lay.fsdp or lay.dp > 1 or lay.gpus == 1:
        flag = f"--gpus {lay.gpus * 2} --fsdp" if not lay.fsdp else f"--gpus {lay.gpus * 2}"
        tries.append((flag, replace(lay, gpus=lay.gpus * 2, fsdp=True)))
    if lay.tp * 2 <= c.gpus_per_node and lay.gpus % (lay.tp * 2) == 0:
        tries.append((f"--tp {lay.tp * 2}", replace(lay, tp=lay.tp * 2)))
    out = []
    from perflab.core.readout import seconds

    for flag, alt in tries:
        try:
            _, q = _one(make_target, alt, c, headroom, budget=budget, whole=whole)
        except InputError as e:
            out.append(f"{flag}: not possible ({e})")
            continue
        except Exception as e:  # noqa: BLE001 - one suggestion's re-plan never ends the plan
            out.append(f"{flag}: could not be planned ({type(e).__name__}: {' '.join(str(e).split())[:160]})")
            continue
        verdict = "fits" if q.fits else "still over"
        out.append(f"{flag}: peak {_gb(q.peak_bytes)} ({verdict}), step {seconds(q.step.step_s)}")
    out.append("a smaller --micro-batch shrinks the activations in proportion (with gradient accumulation "
               "to keep the global batch)")
    return out


def preset_target(name: str, micro_batch: int = 1, seq: int | None = None):
    """A zero-argument builder of perflab's model `name` (a preset of perflab.workload) with a batch of
    `micro_batch` × `seq` tokens, for `plan` (built on `meta` there). The same arguments give the same
    builder, so plans of it share their traces (`perflab.plan.scale`)."""
    return _preset_target(name, micro_batch, seq)


_BUILDERS: dict[tuple, Callable[[], Any]] = {}


def _preset_target(name: str, micro_batch: int, seq: int | None):
    key = (name, micro_batch, seq)
    if key in _BUILDERS:
        return _BUILDERS[key]
    from perflab.workload.models import preset

    cfg = preset(name)
    s = seq or cfg.seq_len

    def build():
        from perflab.audit.target import target_from
        from perflab.workload.models import build_model
        from perflab.workload.train import make_batches

        return target_from({"model": build_model(cfg, seed=None), "batches": make_batches(cfg, micro_batch, s)},
                           f"{cfg.name} (b {micro_batch}, s {s})")

    _BUILDERS[key] = build
    return build
