"""`run_audit(target)`: the learner's training step measured by every lesson's instrument.

    >>> from perflab.audit.target import from_hf_config
    >>> from perflab.audit.run import run_audit
    >>> rep = run_audit(from_hf_config("gpt2", {"n_layer": 2, "n_embd": 64, "n_head": 2}, batch=2, seq=32))
    >>> rep.json["mfu"], rep.json["mfu_basis"], rep.json["breakdown_s"]
    >>> print(rep.summary())

What it runs, in order: a first step (its errors are the learner's, said in one line); `steps` timed
steps, each from `next()` on the batches to the optimizer's update (data wait included); one step under
perflab's FLOP counter (`perflab.flops.counter`: matmul-class FLOPs per phase and per dtype; attention
counted dense, as if the causal mask's upper triangle were computed, which is torch's FlopCounterMode's
convention, while FlashAttention's benchmark `flops()`, the FlashAttention-2 paper §4.1 and Megatron-LM's
`attn_layer_flops` halve causal attention: the report gives that figure too, and names every product the
counter has no formula for, with its time); one step under torch.profiler read as lesson 09 reads a trace
(`perflab.tune.waterfall.breakdown_of_trace`), except the data wait, timed around `next()` in the
timed steps as lesson 07 times it; one step for memory (lesson 03); dynamo's explain of the
loss (lesson 10); the energy meter around the timed steps. It uses other topics' formulas and
measurements, never their widgets.
"""

from __future__ import annotations

import contextlib
import copy
import io
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from perflab.audit.target import (
    AuditInputError,
    BatchSource,
    Target,
    default_loss,
    samples_in,
    to_device,
    token_streams,
    tokens_in,
)
from perflab.core.stats import spread as relative_spread

JSON_FIELDS = ("step_s", "step_s_spread", "tokens_per_s", "flops_per_step", "flops_by_dtype", "flops_6n_per_step",
               "params_total", "params_active", "peak_tflops", "mfu", "hfu", "mfu_basis", "mfu_bases", "breakdown_s",
               "top_ops", "memory_bytes", "graph_breaks", "energy_j_per_step", "recommendations", "flops_uncounted",
               "flops_per_step_causal_halved")
PROFILED_STEPS = 3  # profiled steps behind the breakdown (each category: its average per step)
BREAKDOWN = ("data_wait", "host_sync", "launch", "optimizer", "compute")



@dataclass
class AuditReport:
    """The audit: `json` holds exactly the stable fields (JSON_FIELDS); the rest is for the summary and HTML."""

    json: dict[str, Any]
    name: str
    device: str
    samples_per_s: float | None
    tokens_per_step: int | None
    flops_gap: list[tuple[str, float]] = field(default_factory=list)  # (what, FLOPs) explaining counted − 6N·T
    memory_notes: list[str] = field(default_factory=list)
    energy_note: str = ""
    notes: list[str] = field(default_factory=list)
    hardware_flops_per_step: int = 0
    ceilings: dict[str, float] = field(default_factory=dict)  # 'flops' (FLOP/s), 'bytes' (B/s)
    breaks_read: bool = True  # False: the graph-break report was skipped (graph_breaks is then empty, not "none")
    six_n_how: str = ""  # how 6N·T was made when it is not one N times one T (an encoder–decoder's two streams)
    causes: list[str] = field(default_factory=list)  # what makes the step slow that no rung names (float64, …)

    def summary(self) -> str:
        from perflab.audit.text import summary

        return summary(self)

    def __str__(self) -> str:
        return self.summary()


def count_params(model: torch.nn.Module, cfg: Any = None) -> tuple[int, int, str]:
    """(total, active, how) parameters. Total counts every parameter once (tied weights once; a DTensor
    of an FSDP-sharded model by its global shape, so the count is the model's, not the local shard's).
    Active: for a mixture of experts, total less the routed experts a token does not visit, (E − k) of E
    per MoE layer, with E and k from the config (num_local_experts/num_experts/n_routed_experts,
    num_experts_per_tok/top_k); so active = routed × k/E + everything else. Shared experts (DeepSeek's
    `shared_experts`, Qwen2-MoE's `shared_expert`), which every token visits, are counted whole."""
    total = 0
    for p in model.parameters():
        total += int(p.numel())  # a DTensor reports its global numel
    e = _first_attr(cfg, ("num_local_experts", "num_experts", "n_routed_experts"))
    k = _first_attr(cfg, ("num_experts_per_tok", "top_k", "moe_topk"))
    if not e or not k or e <= k:
        return total, total, "dense: every parameter is used by every token"
    idle = 0
    layers = 0
    done: list[str] = []
    for name, mod in model.named_modules():
        last = name.rpartition(".")[2].lower()
        if not last.endswith("experts") or "shared" in last or any(name.startswith(d + ".") for d in done):
            continue
        n = sum(int(p.numel()) for p in mod.parameters())
        if n == 0:
            continue
        done.append(name)
        layers += 1
        idle += n * (e - k) // e
    return total, total - idle, f"mixture of experts: {layers} MoE layer(s), top-{k} of {e} experts per token"


def _first_attr(cfg, names) -> int | None:
    for n in names:
        v = getattr(cfg, n, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def _embedding_only(model: torch.nn.Module) -> list[torch.Tensor]:
    """Weights of embedding tables that no product uses as a weight (untied token and position
    embeddings), each once: in N for 6N, but a lookup does no multiply-add."""
    lin = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    out: dict[int, torch.Tensor] = {}
    for m in model.modules():
        if isinstance(m, torch.nn.Embedding) and id(m.weight) not in lin:
            out[id(m.weight)] = m.weight
    return list(out.values())


def _encoder_only_params(model: torch.nn.Module) -> set[int]:
    """ids of the parameters only an encoder–decoder's encoder uses (not its decoder, not its output
    head: a token embedding shared by both sides and tied to the head belongs to the decoder's tokens)."""
    get_enc, get_dec = getattr(model, "get_encoder", None), getattr(model, "get_decoder", None)
    if not callable(get_enc) or not callable(get_dec):
        return set()
    try:
        enc, dec = get_enc(), get_dec()
    except Exception:  # noqa: BLE001 - a model that cannot say: no split
        return set()
    if not isinstance(enc, torch.nn.Module) or not isinstance(dec, torch.nn.Module):
        return set()
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    others = {id(p) for p in dec.parameters()}
    if isinstance(head, torch.nn.Module):
        others |= {id(p) for p in head.parameters()}
    return {id(p) for p in enc.parameters()} - others


def six_n_t(model: torch.nn.Module, params_active: int, tokens: int,
            streams: tuple[int, int] | None = None) -> tuple[int, int, str]:
    """(6N·T, the embedding lookups' share of it, how it was made). One stream: 6 · N_active · T. An
    encoder–decoder (`streams` = (T_enc, T_dec)): each parameter works on its own stream's tokens, so
    6 · (N_enc · T_enc + N_dec · T_dec), N_enc the encoder's own parameters and N_dec the rest (decoder,
    output head, shared embedding). The lookups' share is −6 · (table parameters) · (their stream's T)."""
    tables = _embedding_only(model)
    enc_only = _encoder_only_params(model) if streams else set()
    if not streams or not enc_only:
        return 6 * params_active * tokens, -6 * sum(int(w.numel()) for w in tables) * tokens, ""
    t_enc, t_dec = streams
    n_enc = sum(int(p.numel()) for p in model.parameters() if id(p) in enc_only)
    n_dec = params_active - n_enc
    emb = -6 * sum(int(w.numel()) * (t_enc if id(w) in enc_only else t_dec) for w in tables)
    how = (f"encoder–decoder: 6·(N_enc·T_enc + N_dec·T_dec), N_enc = {n_enc:,} encoder parameters on "
           f"T_enc = {t_enc:,} encoder tokens, N_dec = {n_dec:,} (decoder, output head, shared embedding) on "
           f"T_dec = {t_dec:,} decoder tokens")
    return 6 * (n_enc * t_enc + n_dec * t_dec), emb, how


class _OpStats(TorchDispatchMode):
    """Per aten op: calls and bytes of its tensor inputs and outputs (a lower bound on its memory traffic),
    and the (m, n, k) of every 2-D product (for the measured ceiling at the step's own shapes)."""

    def __init__(self):
        super().__init__()
        self.calls: dict[str, int] = defaultdict(int)
        self.bytes: dict[str, int] = defaultdict(int)
        self.shapes: dict[tuple[int, int, int], int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func._overloadpacket.__name__
        self.calls[name] += 1
        n = 0
        for t in (*args, *(out if isinstance(out, (tuple, list)) else (out,))):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                n += t.numel() * t.element_size()
        self.bytes[name] += n
        if name in ("mm", "addmm"):
            a, b = (args[0], args[1]) if name == "mm" else (args[1], args[2])
            if a.dim() == 2 and b.dim() == 2:
                m, k = a.shape
                self.shapes[(int(m), int(b.shape[1]), int(k))] += 2 * int(m) * int(b.shape[1]) * int(k)
        return out


def _sync(device: torch.device) -> None:
    from perflab.core.device import synchronize

    synchronize(device)


@contextlib.contextmanager
def _user_code(what: str, user_file: str | None, point: list[str], samples: int | None):
    """Errors raised by the learner's model, loss or data: one line (out of memory says where and what to change)."""
    from perflab.compiler.breaks import user_error
    from perflab.core.errors import PerflabError
    from perflab.core.results import classify_failure

    try:
        yield
    except PerflabError:
        raise
    except Exception as exc:  # noqa: BLE001 - the learner's code
        if classify_failure(exc) == "oom":
            raise AuditInputError(f"out of memory during {point[0]}" + (f" with batches of {samples} samples" if samples
                                                                        else "") + ": choose a smaller batch (or "
                                  "sequence length)") from None
        raise user_error(exc, what, user_file) from None


def run_audit(target: Target, *, device: str | torch.device | None = None, steps: int = 5, warmup: int = 1,
              try_rungs: bool = False, explain_breaks: bool = True,
              progress: Callable[[str], None] | None = None) -> AuditReport:
    """Audit one training step (module docstring). Bad input raises `AuditInputError` with one line.
    The measurements hold the device's lock (`perflab.core.lock`): other learners' measurements wait."""
    from perflab.core.device import pick_device
    from perflab.core.lock import device_lock
    from perflab.core.validate import positive_int

    steps = positive_int("steps", steps)
    dev = pick_device(str(device)) if device is not None else pick_device()
    with device_lock(dev, label=f"perflab audit of {target.name}"):
        return _audit(target, dev, steps, warmup, try_rungs, explain_breaks, progress)


def _audit(target: Target, dev: torch.device, steps: int, warmup: int, try_rungs: bool, explain_breaks: bool,
           progress: Callable[[str], None] | None) -> AuditReport:
    from perflab.core.device import describe

    say = progress or (lambda _m: None)
    info = describe(dev)
    point = ["moving the model to the device"]
    model = target.model
    samples0: list[int | None] = [None]
    with _user_code(f"moving the model from {target.name} to {dev}", target.user_file, point, None):
        model.to(dev)
    init_state = copy.deepcopy(model.state_dict()) if try_rungs else {}
    opt = target.optimizer or torch.optim.AdamW(model.parameters())
    loss_fn = target.loss_fn or default_loss
    src = BatchSource(target.batches, need=warmup + steps + 3 + (6 if try_rungs else 0))
    model.train()

    def step(batch) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, batch)
        if not isinstance(loss, torch.Tensor):
            raise AuditInputError(f"the loss is a {type(loss).__name__}, not a tensor: loss_fn(model, batch) must "
                                  "return a scalar tensor")
        if loss.numel() != 1:
            raise AuditInputError(f"the loss has shape {tuple(loss.shape)}, not a scalar: reduce it (e.g. .mean()) "
                                  "in loss_fn")
        if not loss.requires_grad:
            raise AuditInputError("the loss does not require a gradient: compute it from the model's output "
                                  "(not under torch.no_grad, not .detach()ed)")
        loss.backward()
        opt.step()
        return loss

    def fetch():
        with torch.profiler.record_function("data"):
            b = src.next()
            return to_device(b, dev)

    # 1. the first step: the learner's errors, in one line
    say("first step")
    point[0] = "the first step"
    with _user_code(f"fetching a batch from {target.name}", target.user_file, point, None):
        first = fetch()
    samples0[0] = samples_in(first)
    with _user_code(f"the model's forward/backward (or loss_fn) of {target.name} on its first batch",
                    target.user_file, point, samples0[0]):
        losses = [step(first)]
        for _ in range(warmup - 1):
            losses.append(step(fetch()))
        _sync(dev)
    _finite(losses, "its first batch")
    tokens = tokens_in(first, target.tokens_per_batch, model)
    streams = None if target.tokens_per_batch else token_streams(first, model)
    samples = samples0[0]

    # 2. timed steps (data wait included), with the energy meter around them
    from perflab.audit.energy import EnergyMeter

    say(f"timing {steps} steps")
    point[0] = "the timed steps"
    meter = EnergyMeter(dev)
    times: list[float] = []
    waits: list[float] = []
    with _user_code(f"a timed step of {target.name}", target.user_file, point, samples):
        meter.start()
        last = None
        for _ in range(steps):
            t0 = time.perf_counter()
            b = fetch()
            waits.append(time.perf_counter() - t0)  # lesson 07: the loop's wait, timed around next()
            last = step(b)
            _sync(dev)
            times.append(time.perf_counter() - t0)
        joules = meter.stop()
    _finite([last], "a timed step")  # read after the clock stopped: no sync inside the timed steps
    step_s = statistics.median(times)
    spread = relative_spread(times)  # IQR / median, the rule `bench().spread` uses

    # 3. FLOPs per phase and dtype (perflab's counter), op bytes and product shapes
    from perflab.flops.counter import count_flops

    say("counting FLOPs")
    point[0] = "counting FLOPs"
    batch = fetch()
    stats = _OpStats()
    with _user_code(f"a counted step of {target.name}", target.user_file, point, samples), stats:
        fc = count_flops(step, batch)
    params_total, params_active, moe_how = count_params(model, target.hf_config)
    model_flops, hw_flops = fc.model, fc.hardware
    six_n, emb, six_n_how = six_n_t(model, params_active, tokens, streams) if tokens else (None, 0, "")
    gap: list[tuple[str, float]] = []
    if six_n is not None:
        attn = sum(v for k, v in fc.by_op.items() if "attention" in k and "recomputed" not in k)
        bmm = sum(v for k, v in fc.by_op.items() if k in ("bmm", "baddbmm"))
        gap.append(("attention (scores and values products, not in 6N; counted dense)", attn + bmm))
        gap.append(("embedding tables (in N, but a lookup does no multiply-add)", emb))
        if params_active != params_total:
            gap.append((f"experts not visited ({params_total - params_active:,} parameters): left out of N "
                        f"already ({moe_how})", 0))
        rest = "the rest (biases and norm weights in N; routers, convolutions, anything else"
        if streams and streams[0] != streams[1]:
            rest += ("; the decoder's cross-attention keys and values, in N_dec at T_dec but run on the encoder's "
                     "T_enc tokens")
        if fc.uncounted:
            rest += "; less the FLOPs of the uncounted ops named above"
        gap.append((rest + ")", model_flops - six_n - (attn + bmm) - emb))

    # 4. one profiled step, read as lesson 09 reads a trace
    from perflab.profiling.ops import self_times
    from perflab.profiling.trace import load
    from perflab.tune.waterfall import breakdown_of_trace, profile_steps

    say("profiling three steps")
    point[0] = "the profiled step"
    with _user_code(f"a profiled step of {target.name}", target.user_file, point, samples):
        # several steps, so that one disturbed step does not decide the breakdown (averaged per step)
        raw = profile_steps(lambda: step(fetch()), dev, steps=PROFILED_STEPS)
    from perflab.profiling.diagnose import diagnose

    profiled = diagnose(raw)
    profile_notes = [n for n in (profiled.versus_timed(step_s),
                                 None if profiled.stable else f"breakdown: {profiled.stability()}") if n]
    # data wait as lesson 07 times it (around next() in the timed steps: the profiler's overhead on small
    # ops would shrink its share); the rest of the step split by the profiled step's shares of the rest
    data_s = min(statistics.median(waits), step_s)
    bd = breakdown_of_trace(raw)
    rest = {"host_sync": bd["host_sync"], "launch": bd["launch_overhead"], "optimizer": bd["optimizer"],
            "compute": bd["compute"]}
    total = sum(rest.values())
    breakdown = {"data_wait": data_s, **{k: (v / total if total else (1.0 if k == "compute" else 0.0)) * (step_s - data_s)
                                          for k, v in rest.items()}}

    # 5. utilization, per dtype, against the one basis every MFU shares (perflab.flops.mfu)
    from perflab.flops.mfu import bases_for, utilization

    say("looking up this device's matmul ceiling")
    hw_by = fc.hardware_by_dtype()
    u = utilization(step_s, fc.model_by_dtype(), bases_for(dev, [d for d, n in hw_by.items() if n > 0]), hw_by)
    ceil_flops = max((b.tflops or 0.0 for b in u.bases.values()), default=0.0) * 1e12
    bw = _bandwidth(dev)
    trace = load(raw)
    top = _top_ops(trace, self_times, fc, stats, ceil_flops, bw)
    uncounted = _uncounted(trace, self_times, fc)
    causes = _float64_cause(fc, u, dev)

    # 6. memory, per phase
    say("memory")
    point[0] = "the memory step"
    with _user_code(f"a memory step of {target.name}", target.user_file, point, samples):
        mem, mem_notes = _memory(model, opt, step, loss_fn, fetch(), dev, target, tokens, samples, params_total)

    # 7. graph breaks (lesson 10's explain)
    breaks: list[dict[str, Any]] = []
    notes = list(target.notes) + profile_notes
    if explain_breaks:
        say("graph breaks")
        breaks, note = _graph_breaks(model, loss_fn, batch)
        if note:
            notes.append(note)

    # 8. recommendations
    from perflab.audit import recommend

    apply = recommend.applicable(target, opt, dev, dtypes=list(fc.hardware_by_dtype()), breakdown=breakdown,
                                 step_s=step_s)
    recs = recommend.ranked(apply, breakdown)
    if try_rungs and recs:
        say("trying the rungs")
        point[0] = "--try"
        batches = [src.next() for _ in range(6)]
        with _user_code(f"a tried step of {target.name}", target.user_file, point, samples):
            recommend.try_rungs(recs, target, init_state, opt, loss_fn, batches, dev, progress=say)
    for r in recs:
        r.pop("_can_save_s", None)

    energy = joules / steps if joules is not None else None
    out = {
        "step_s": step_s, "step_s_spread": spread, "tokens_per_s": tokens / step_s if tokens else None,
        "flops_per_step": int(model_flops), "flops_by_dtype": {d: int(v) for d, v in fc.hardware_by_dtype().items()},
        "flops_6n_per_step": six_n, "params_total": params_total, "params_active": params_active,
        "peak_tflops": u.effective_tflops if u.spec else None, "mfu": u.mfu, "hfu": u.hfu,
        "mfu_basis": u.basis_label(), "mfu_bases": {d: b.as_dict() for d, b in u.bases.items()}, "breakdown_s": breakdown,
        "top_ops": top, "memory_bytes": mem, "graph_breaks": breaks, "energy_j_per_step": energy,
        "recommendations": recs, "flops_uncounted": uncounted,
        "flops_per_step_causal_halved": int(fc.model_causal_halved),
    }
    assert tuple(out) == JSON_FIELDS
    return AuditReport(out, target.name, f"{info.kind}: {info.name}", samples / step_s if samples else None, tokens,
                       gap, mem_notes, meter.reason if joules is None else f"energy by {meter.source}", notes,
                       int(hw_flops), {"flops": ceil_flops, "bytes": bw or 0.0}, explain_breaks and not any(
                           n.startswith("graph breaks not read") for n in notes), six_n_how, causes)


def _finite(losses: list, where: str) -> None:
    """One line, and no report, when a loss is NaN or infinite: every figure of such a step describes a
    run that is not training."""
    for loss in losses:
        if isinstance(loss, torch.Tensor) and not bool(torch.isfinite(loss.detach()).all()):
            raise AuditInputError(f"the loss is {float(loss.detach().float().item())} on {where}: the step does not "
                                  "train, so its timing would describe nothing; fix the model, its inputs or the "
                                  "loss (a learning rate, an unscaled fp16 loss, a log of 0) and run again")


def _uncounted(trace, self_times, fc) -> list[dict[str, Any]]:
    """The products (and custom ops) the FLOP counter has no formula for, each with its calls and time in the profiled step
    (device time on a GPU), so their missing FLOPs are named, never filed silently under 'the rest'."""
    if not fc.uncounted:
        return []
    times = self_times(trace)
    k = max(len(trace.steps), 1)
    out = []
    for op, calls in sorted(fc.uncounted.items()):
        r = times.get(op)
        secs = ((r[3] if trace.on_gpu else r[1]) / k) if r else None
        out.append({"name": op, "calls": int(calls), "time_s": secs})
    return out


def _float64_cause(fc, u, dev: torch.device) -> list[str]:
    """A step whose products ran in float64: named as a cause with what it costs against float32 on this
    device (each dtype's FLOPs at its own rate; float32's is its MFU basis, `perflab.flops.mfu.mfu_basis`:
    the datasheet peak, or the measured ceiling)."""
    f64 = fc.hardware_by_dtype().get("fp64", 0)
    if not f64 or "fp64" not in u.bases:
        return []
    from perflab.flops.mfu import mfu_basis

    r64 = float(u.bases["fp64"].tflops or 0.0)
    try:
        b32 = mfu_basis(dev, "fp32")
        r32, how = float(b32.tflops or 0.0), f"fp32's basis, {b32.label()}"
    except Exception:  # noqa: BLE001 - without a float32 rate the cost is not said, the cause still is
        r32, how = 0.0, "fp32"
    share = f64 / max(fc.hardware, 1)
    line = f"float64: {share:.0%} of the step's matmul-class FLOPs ran in float64"
    if r64 > 0 and r32 > 0:
        lost = f64 / (r64 * 1e12) - f64 / (r32 * 1e12)
        if lost > 0:
            line += (f", at {r64:.3g} TFLOP/s against {how} ({r32 / r64:.2g}× the rate): at those rates they take "
                     f"{lost * 1e3:.3g} ms more per step than in float32")
    return [line + "; training rarely needs float64: build the model and batches in float32 (model.float())"]


def _bandwidth(dev: torch.device) -> float | None:
    """This device's measured copy bandwidth in bytes/s (a short measurement)."""
    from perflab.core.measure import measure_copy_bandwidth

    try:
        r = measure_copy_bandwidth(64 * 2**20 if dev.type == "cuda" else 16 * 2**20, dev, warmup_ms=10, rep_ms=40)
    except Exception:  # noqa: BLE001 - without it, ops are not marked bound
        return None
    return float(r.gbps) * 1e9


def _top_ops(trace, self_times, fc, stats: _OpStats, ceil_flops: float, bw: float | None, n: int = 8) -> list[dict]:
    """The step's top ops by self time (device time on a GPU), with FLOPs, bytes, achieved rates and bound."""
    times = self_times(trace)
    k = max(len(trace.steps), 1)
    flops_by = defaultdict(int)
    for name, v in fc.by_op.items():
        flops_by[name.split(" (")[0]] += v
    rows = []
    for name, r in times.items():
        secs = (r[3] if trace.on_gpu else r[2]) / k
        if secs <= 0 or not name.startswith("aten::"):
            continue
        short = name.removeprefix("aten::")
        calls = stats.calls.get(short, 0)
        f = flops_by.get(short, 0)
        b = stats.bytes.get(short, 0)
        row = {"name": name, "count": round(r[0] / k), "self_s": secs, "flops": int(f), "bytes": int(b),
               "flops_per_s": f / secs if f else 0.0, "bytes_per_s": b / secs if b else 0.0, "bound": None}
        if not calls:  # an op the counting pass did not see (e.g. under the profiler only)
            row["flops"], row["bytes"], row["flops_per_s"], row["bytes_per_s"] = None, None, None, None
        elif ceil_flops and bw:
            intensity = f / b if b else float("inf")
            row["bound"] = "compute" if intensity >= ceil_flops / bw else "memory"
        rows.append(row)
    rows.sort(key=lambda r: -r["self_s"])
    return rows[:n]


def _memory(model, opt, step, loss_fn, batch, dev, target: Target, tokens, samples, params_total):
    """Bytes per part (weights, grads, optimizer, activations, peak) and lesson 03's estimate where the
    model's shape is readable from its config."""
    from perflab.memory.probe import allocated_during, saved_tensors

    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    weights += sum(b.numel() * b.element_size() for b in model.buffers())
    states = sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values()
                 if isinstance(v, torch.Tensor))
    opt.zero_grad(set_to_none=True)
    _, saved = saved_tensors(lambda: loss_fn(model, batch), exclude=list(model.parameters()))
    _ = None
    notes = []
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        base = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        step(batch)
        torch.cuda.synchronize(dev)
        peak = int(torch.cuda.max_memory_allocated(dev))
        rise = peak - base
        notes.append("peak: torch.cuda.max_memory_allocated over one step")
    else:
        rise = allocated_during(lambda: step(batch), dev)["peak_bytes"]
        peak = int(weights + states + rise)
        notes.append("peak: weights + optimizer states held before the step + the highest rise the CPU allocator "
                     "saw during it (profiler memory events)")
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    mem = {"weights": int(weights), "grads": int(grads), "optimizer": int(states), "activations": int(saved.total_bytes),
           "peak": int(peak), "estimate": None}
    notes.append("activations: the storages autograd saved for the backward in one forward (checkpointed regions "
                 "save through their own hooks and are not seen)")
    est = _estimate(target.hf_config, params_total, tokens, samples, opt)
    if est is not None:
        mem["estimate"] = int(est)
        rest = peak - est
        notes.append(f"lesson 03's estimate (fp32 weights, gradients and AdamW states; Korthikanti et al. 2022's "
                     f"activations) is {est / 2**20:.3g} MiB; the remainder {rest / 2**20:+.3g} MiB is temporaries "
                     "(logits and their gradient, attention workspaces), the allocator's rounding and whatever the "
                     "formula counts that this model does not store (dropout masks without dropout, s×s scores under "
                     "SDPA)")
    return mem, notes


def _estimate(cfg, params: int, tokens, samples, opt) -> float | None:
    """Lesson 03's estimate for a transformer whose shape the config gives; None otherwise."""
    if cfg is None or not tokens or not samples or not isinstance(opt, (torch.optim.Adam, torch.optim.AdamW)):
        return None
    from perflab.memory.estimate import estimate

    layers = _first_attr(cfg, ("num_hidden_layers", "n_layer", "num_layers"))
    hidden = _first_attr(cfg, ("hidden_size", "n_embd", "d_model"))
    heads = _first_attr(cfg, ("num_attention_heads", "n_head"))
    vocab = _first_attr(cfg, ("vocab_size",))
    if not (layers and hidden and heads):
        return None
    seq = tokens // samples
    try:
        est = estimate(params=params, precision="fp32", optimizer="adamw", batch=samples, seq=seq, layers=layers,
                       hidden=hidden, heads=heads, vocab=vocab)
    except Exception:  # noqa: BLE001 - a shape the formula cannot take: no estimate, said as null
        return None
    return float(est.total_bytes)


def _graph_breaks(model, loss_fn, batch) -> tuple[list[dict[str, Any]], str]:
    """Graph breaks of the loss (forward), as `perflab compile --explain` reports them."""
    from perflab.compiler.breaks import count_executions, explain

    def fwd(b):
        return loss_fn(model, b)

    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), _quiet_stderr():
            rep = explain(fwd, batch)
            if rep.breaks:
                runs = count_executions(fwd, (batch,), {}, [(b["file"], b["line"]) for b in rep.breaks])
                for b in rep.breaks:
                    b["hits"] = runs[(b["file"], b["line"])]
    except Exception as e:  # noqa: BLE001 - the tracer's limit, not the learner's error: said in one note
        return [], f"graph breaks not read: torch._dynamo could not trace the loss ({type(e).__name__})"
    return [{"file": b["file"], "line": b["line"], "where": b["where"], "reason": b["reason"], "hits": b.get("hits")}
            for b in rep.breaks], ""


@contextlib.contextmanager
def _quiet_stderr():
    err = sys.stderr
    sys.stderr = io.StringIO()
    try:
        yield
    finally:
        sys.stderr = err


def as_mapping(rep: AuditReport | Mapping[str, Any]) -> dict[str, Any]:
    """The JSON fields of an audit (a report, or the dict `--json` printed)."""
    return dict(rep.json) if isinstance(rep, AuditReport) else dict(rep)
