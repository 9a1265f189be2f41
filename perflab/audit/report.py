"""The audit of one training step as a typed object: its parts, each a dataclass, read by attribute by
its terminal summary (`summary`, here) and its HTML page (`perflab.course.audit_html`).

    >>> rep = run_audit(target)                     # perflab.audit.run
    >>> rep.time.step_s, rep.utilization.mfu, rep.waterfall.largest()
    >>> rep.to_json()                               # exactly JSON_FIELDS, made here, once, at the edge

The waterfall's parts are lesson 11's (`perflab.tune.waterfall.CATEGORIES`, named by its `LABELS`);
MFU and HFU are `perflab.flops.mfu.utilization`'s, against one basis per dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from perflab.core.jsonable import JSON, to_json
from perflab.core.readout import nbytes, num, percent, seconds
from perflab.tune.waterfall import CATEGORIES, LABELS

if TYPE_CHECKING:
    from perflab.audit.fp8 import Fp8Gains
    from perflab.core.quietness import Quietness
    from perflab.flops.mfu import Utilization

# the stable fields of `perflab audit --json`, in order
JSON_FIELDS = ("step_s", "step_s_spread", "tokens_per_s", "flops_per_step", "flops_by_dtype", "flops_6n_per_step",
               "params_total", "params_active", "peak_tflops", "mfu", "hfu", "mfu_basis", "mfu_bases", "breakdown_s",
               "top_ops", "memory_bytes", "graph_breaks", "energy_j_per_step", "recommendations", "flops_uncounted",
               "flops_per_step_causal_halved", "fp8_gemms")
# the waterfall's parts in the audit's order: the data wait (timed around next() in the timed steps), the
# parts the profiled step names, then compute (the rest of the step)
BREAKDOWN = ("data_wait", *(c for c in CATEGORIES if c not in ("data_wait", "compute")), "compute")

# the summary's words for the FLOPs it counts, and for the other convention it prints beside them
CONVENTION = ("matmul-class FLOPs (2 per multiply-add), forward + backward, attention included and counted dense: the "
              "causal mask's skipped upper triangle is counted as computed, as torch's FlopCounterMode and "
              "6N + 12·L·H·Q·T count it; hardware FLOPs add recomputation")
HALVED = ("causal attention halved, as FlashAttention's benchmark flops() (// (2 if causal else 1)), the "
          "FlashAttention-2 paper §4.1 and Megatron-LM's attn_layer_flops count it")


@dataclass(frozen=True)
class StepTime:
    """The timed steps, each from `next()` on the batches to the optimizer's update (data wait included)."""

    step_s: float  # median seconds per step
    spread: float  # IQR / median of the timed steps
    tokens_per_step: int | None  # None: the batches hold no token ids (images, features)
    samples_per_step: int | None

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens_per_step / self.step_s if self.tokens_per_step else None

    @property
    def samples_per_s(self) -> float | None:
        return self.samples_per_step / self.step_s if self.samples_per_step else None


@dataclass(frozen=True)
class GapTerm:
    """One term of counted FLOPs − 6N·T: what it is, and its FLOPs per step."""

    what: str
    flops: int


@dataclass(frozen=True)
class Uncounted:
    """An op the FLOP counter has no formula for: its calls and time in the profiled step (device time
    on a GPU; None when the profiler did not see it)."""

    name: str
    calls: int
    time_s: float | None


@dataclass(frozen=True)
class Work:
    """What one step computes: FLOPs counted by perflab's counter (matmul-class, forward + backward,
    causal attention counted dense), per dtype, beside 6N·T and the terms of the gap between them."""

    flops_per_step: int  # model FLOPs
    flops_by_dtype: dict[str, int]  # hardware FLOPs (recompute included) per dtype
    hardware_flops_per_step: int
    flops_causal_halved: int  # the model FLOPs with causal attention counted at half
    params_total: int
    params_active: int  # less the routed experts a token does not visit
    six_n: int | None  # 6N·T; None without tokens
    six_n_how: str = ""  # how 6N·T was made when it is not one N times one T (an encoder–decoder's two streams)
    gap: list[GapTerm] = field(default_factory=list)  # terms of flops_per_step − six_n
    uncounted: list[Uncounted] = field(default_factory=list)


@dataclass(frozen=True)
class Waterfall:
    """Seconds per step of each part of the step (BREAKDOWN's order; lesson 11's categories), summing to
    the median step: the data wait as timed, the rest split by the profiled steps' shares."""

    seconds: dict[str, float]

    def largest(self) -> str:
        """The part that holds the most seconds of the step (what to attack first)."""
        return max(self.seconds, key=lambda k: self.seconds[k])

    def by_size(self) -> list[tuple[str, float]]:
        """(part, seconds), largest first (ties in BREAKDOWN's order)."""
        return sorted(self.seconds.items(), key=lambda kv: -kv[1])

    @staticmethod
    def label(part: str) -> str:
        return LABELS[part]

    def to_json(self) -> JSON:
        return dict(self.seconds)


@dataclass(frozen=True)
class TopOp:
    """One of the step's top ops by self time, against this device's roofline. FLOPs, bytes and rates
    are None for an op the counting pass did not see; `bound` is None without a ceiling or bandwidth."""

    name: str
    count: int  # calls per step
    self_s: float  # self time per step (device time on a GPU)
    flops: int | None
    bytes: int | None  # tensor inputs + outputs: a lower bound on its memory traffic
    flops_per_s: float | None
    bytes_per_s: float | None
    bound: str | None = None  # 'compute' or 'memory'


@dataclass(frozen=True)
class Memory:
    """Bytes of one step by part, and lesson 03's estimate where the model's shape is readable."""

    weights: int
    grads: int
    optimizer: int
    activations: int  # the storages autograd saved for the backward in one forward
    peak: int
    estimate: int | None = None
    notes: list[str] = field(default_factory=list)  # how each figure was read

    JSON_SKIP = ("notes",)

    def parts(self) -> list[tuple[str, int | None]]:
        """(part, bytes) in the JSON's order."""
        return [(k, getattr(self, k)) for k in ("weights", "grads", "optimizer", "activations", "peak", "estimate")]


@dataclass(frozen=True)
class GraphBreak:
    file: str
    line: int
    where: str  # 'file.py:LINE in function'
    reason: str
    hits: int | None  # times the break ran in one forward


@dataclass(frozen=True)
class GraphBreaks:
    """dynamo's graph breaks of the loss (lesson 10). `read` False: skipped, or dynamo could not trace the
    loss, so an empty list says nothing."""

    sites: list[GraphBreak] = field(default_factory=list)
    read: bool = True


@dataclass(frozen=True)
class Energy:
    j_per_step: float | None  # None: not measurable here
    note: str  # the meter, or why there is none


@dataclass(frozen=True)
class Ceilings:
    """This device's roofline: the measured matmul ceiling (FLOP/s) and copy bandwidth (bytes/s; 0 unknown)."""

    flops: float
    bytes: float


@dataclass
class Recommendation:
    """A capstone rung that applies to the step: why, ranked by the seconds of the parts it acts on
    (`can_save_s`); with --try, its measured speed-up, loss parity, the machine's quietness and verdict."""

    rung: str
    why: str
    can_save_s: float  # the most it can save: the seconds of the waterfall parts it acts on
    measured_speedup: float | None = None
    parity_ok: bool | None = None  # None: not measured, or not checkable (shuffled data)
    quietness: Quietness | None = None  # of the tried run and the run it is compared with
    verdict: str | None = None  # 'keep it', 'not kept' or 'inconclusive'

    def to_json(self) -> JSON:
        out: JSON = {"rung": self.rung, "why": self.why, "measured_speedup": self.measured_speedup,
                     "parity_ok": self.parity_ok}
        if self.quietness is not None:
            out["quietness"] = self.quietness.to_json()
        if self.verdict is not None:
            out["verdict"] = self.verdict
        return out


@dataclass
class AuditReport:
    """The audit of one training step (`perflab.audit.run.run_audit`)."""

    name: str
    device: str  # 'kind: name', as perflab.core.device.describe names the device measured
    time: StepTime
    work: Work
    utilization: Utilization  # MFU and HFU per dtype against each dtype's basis (perflab.flops.mfu)
    waterfall: Waterfall
    top_ops: list[TopOp]
    memory: Memory
    breaks: GraphBreaks
    energy: Energy
    recommendations: list[Recommendation]
    ceilings: Ceilings
    notes: list[str] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)  # what makes the step slow that no rung names (float64, …)
    fp8: Fp8Gains | None = None  # the step's GEMMs, bf16 against fp8 on a GPU (perflab.audit.fp8); None: not looked at

    @property
    def peak_tflops(self) -> float | None:
        """The FLOPs-weighted datasheet peak, when every dtype's basis is one; None otherwise ('peak unknown')."""
        u = self.utilization
        return u.effective_tflops if u.spec else None

    def to_json(self) -> JSON:
        """Exactly the stable fields (JSON_FIELDS), for `perflab audit --json`."""
        t, w, u = self.time, self.work, self.utilization
        out: JSON = {
            "step_s": t.step_s, "step_s_spread": t.spread, "tokens_per_s": t.tokens_per_s,
            "flops_per_step": w.flops_per_step, "flops_by_dtype": dict(w.flops_by_dtype), "flops_6n_per_step": w.six_n,
            "params_total": w.params_total, "params_active": w.params_active, "peak_tflops": self.peak_tflops,
            "mfu": u.mfu, "hfu": u.hfu, "mfu_basis": u.basis_label(),
            "mfu_bases": {d: to_json(b.as_dict()) for d, b in u.bases.items()},
            "breakdown_s": self.waterfall.to_json(), "top_ops": to_json(self.top_ops),
            "memory_bytes": to_json(self.memory), "graph_breaks": to_json(self.breaks.sites),
            "energy_j_per_step": self.energy.j_per_step, "recommendations": to_json(self.recommendations),
            "flops_uncounted": to_json(w.uncounted), "flops_per_step_causal_halved": w.flops_causal_halved,
            "fp8_gemms": None if self.fp8 is None else self.fp8.to_json(),
        }
        assert tuple(out) == JSON_FIELDS
        return out

    @property
    def json(self) -> JSON:
        """`to_json()`: the audit as JSON, for what reads it as a mapping (lab 11's check, the grader)."""
        return self.to_json()

    def summary(self) -> str:
        return summary(self)

    def __str__(self) -> str:
        return self.summary()


def as_mapping(rep: AuditReport | JSON) -> JSON:
    """The JSON fields of an audit (a report, or the dict `--json` printed)."""
    return rep.to_json() if isinstance(rep, AuditReport) else dict(rep)


def summary(rep: AuditReport) -> str:
    """The terminal summary of an audit: units on every number, only the digits a timing supports."""
    t, w, u, wf = rep.time, rep.work, rep.utilization, rep.waterfall
    out = [f"audit of {rep.name} on {rep.device}"]
    out.append(f"time     step {seconds(t.step_s)} (median; spread IQR/median {percent(t.spread, 2)})"
               + (f", {num(t.tokens_per_s)} tokens/s" if t.tokens_per_s else ", tokens/s n/a (no token count)")
               + (f", {num(t.samples_per_s)} samples/s" if t.samples_per_s else ""))
    out.append(f"work     {num(float(w.flops_per_step))} FLOPs per step counted by perflab's counter ({CONVENTION})")
    out.append("         by dtype: " + ", ".join(f"{d} {num(float(v))}" for d, v in w.flops_by_dtype.items())
               + f"; hardware FLOPs {num(float(w.hardware_flops_per_step))}")
    if w.flops_causal_halved != w.flops_per_step:
        out.append(f"         {num(float(w.flops_causal_halved))} FLOPs per step with {HALVED}; every other figure "
                   "here, MFU included, uses the dense count")
    for x in w.uncounted:
        took = seconds(x.time_s) if x.time_s is not None else "time not seen by the profiler"
        share = f" ({percent(x.time_s / t.step_s)} of the step)" if x.time_s and t.step_s else ""
        out.append(f"         not counted: {x.name}, {x.calls} call(s), {took}{share}: the counter has no formula for "
                   "it, so the products it runs are missing from the count, MFU and the gap below")
    if w.six_n:
        out.append(f"         6N·tokens = {num(float(w.six_n))} (N = {w.params_active:,} active parameters"
                   + (f" of {w.params_total:,}" if w.params_active != w.params_total else "")
                   + f"); counted − 6N·T = {num(float(w.flops_per_step - w.six_n))}:")
        if w.six_n_how:
            out.append(f"         ({w.six_n_how})")
        for g in w.gap:
            out.append(f"           {num(float(g.flops)):>10}  {g.what}")
    else:
        out.append(f"         6N·tokens n/a (no token count); parameters {w.params_total:,}")
    peak = f"{num(rep.peak_tflops)} TFLOP/s" if rep.peak_tflops else "peak unknown"
    out.append(f"MFU      {percent(u.mfu)}   HFU {percent(u.hfu)}   ({peak}; basis: {u.basis_label()})")
    out.append("where    " + ", ".join(f"{wf.label(k)} {seconds(v)} ({percent(v / t.step_s if t.step_s else 0)})"
                                       for k, v in wf.by_size()))
    out.append(f"         largest share: {wf.label(wf.largest())}")
    if rep.top_ops:
        out.append("top ops  name, calls, self time, achieved FLOP/s, bytes/s (tensor inputs + outputs), bound "
                   "(against the measured ceiling and copy bandwidth; –: not seen by the counting pass)")
        for r in rep.top_ops:
            fl = "–" if r.flops_per_s is None else (f"{num(r.flops_per_s / 1e9)} GFLOP/s" if r.flops
                                                    else "no matmul FLOPs")
            by = "–" if r.bytes_per_s is None else f"{num(r.bytes_per_s / 1e9)} GB/s"
            out.append(f"         {r.name}, {r.count}, {seconds(r.self_s)}, {fl}, {by}, {r.bound or '–'}")
    if rep.fp8 is not None:
        first, *rest = rep.fp8.lines()
        out.append(f"fp8      {first}")
        out += [f"         {line}" for line in rest]
    m = rep.memory
    out.append(f"memory   peak {nbytes(m.peak)}: weights {nbytes(m.weights)}, grads {nbytes(m.grads)}, "
               f"optimizer {nbytes(m.optimizer)}, activations {nbytes(m.activations)}"
               + (f"; lesson 03's estimate {nbytes(m.estimate)}" if m.estimate else "; no estimate (shape not readable)"))
    for n in m.notes:
        out.append(f"         {n}")
    if not rep.breaks.read:
        out.append("compiler graph breaks not read (skipped, or dynamo could not trace the loss)")
    else:
        out.append(f"compiler {len(rep.breaks.sites)} graph break site(s)")
    for b in rep.breaks.sites:
        out.append(f"         {b.where}: {b.reason}")
    e = rep.energy
    if e.j_per_step is None:
        out.append(f"energy   {e.note}")
    else:
        per_tok = f", {num(e.j_per_step / t.tokens_per_step)} J/token" if t.tokens_per_step else ""
        out.append(f"energy   {num(e.j_per_step)} J/step{per_tok} ({e.note})")
    if rep.recommendations:
        out.append("to try   (the capstone's rungs that apply, largest possible saving first)")
        for i, r in enumerate(rep.recommendations, 1):
            out.append(f"         {i}. {r.rung}: {r.why}")
    else:
        out.append("to try   no rung of the capstone applies to this step")
    for c in rep.causes:
        out.append(f"cause    {c}")
    for n in rep.notes:
        out.append(f"note     {n}")
    return "\n".join(out)
