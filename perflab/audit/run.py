"""`run_audit(target)`: the learner's training step measured by every lesson's instrument.

    >>> from perflab.audit.target import from_hf_config
    >>> from perflab.audit.run import run_audit
    >>> rep = run_audit(from_hf_config("gpt2", {"n_layer": 2, "n_embd": 64, "n_head": 2}, batch=2, seq=32))
    >>> rep.utilization.mfu, rep.utilization.basis_label(), rep.waterfall.seconds
    >>> print(rep.summary())

What it runs, in order: a first step (its errors are the learner's, said in one line); `steps` timed
steps, each from `next()` on the batches to the optimizer's update (data wait included); one step under
perflab's FLOP counter (`perflab.flops.counter`: matmul-class FLOPs per phase and per dtype; attention
counted dense, as if the causal mask's upper triangle were computed, which is torch's FlopCounterMode's
convention, while FlashAttention's benchmark `flops()`, the FlashAttention-2 paper §4.1 and Megatron-LM's
`attn_layer_flops` halve causal attention: the report gives that figure too, and names every product the
counter has no formula for, with its time), its GEMMs by shape predicted in bf16 and in fp8 on a GPU
(`perflab.audit.fp8`, lesson 16's roofline with the cast passes); one step under torch.profiler read as lesson 09 reads a trace
(`perflab.tune.waterfall.breakdown_of_trace`), except the data wait, timed around `next()` in the
timed steps as lesson 07 times it; one step for memory (lesson 03); dynamo's explain of the
loss (lesson 10); the energy meter around the timed steps. It uses other topics' formulas and
measurements, never their widgets. The result is a typed `perflab.audit.report.AuditReport`.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from perflab.audit.report import (
    BREAKDOWN,
    JSON_FIELDS,
    AuditReport,
    Ceilings,
    Energy,
    GraphBreaks,
    StepTime,
    Waterfall,
)
from perflab.audit.target import (
    AuditInputError,
    BatchSource,
    Target,
    default_loss,
    samples_in,
    target_from,
    to_device,
    token_streams,
    tokens_in,
)
from perflab.core.stats import spread as relative_spread

if TYPE_CHECKING:
    from perflab.audit.fp8 import Fp8Gains
    from perflab.core.hardware import AcceleratorSpec

__all__ = ["BREAKDOWN", "JSON_FIELDS", "AuditReport", "fp8_step", "run_audit", "waterfall_of"]

PROFILED_STEPS = 3  # profiled steps behind the breakdown (each category: its average per step)


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
              try_rungs: bool = False, explain_breaks: bool = True, gpu: str | AcceleratorSpec | None = None,
              progress: Callable[[str], None] | None = None) -> AuditReport:
    """Audit one training step (module docstring). `device` is parsed here, once (`perflab.core.device.pick_device`:
    default $PERFLAB_DEVICE, else the best available). `gpu`: the GPU to predict fp8 against bf16 for, per
    GEMM of the step (an id of perflab's hardware table; default the device audited, when it is a GPU the
    table knows: `perflab.audit.fp8.choose_gpu`). Bad input raises `AuditInputError` (or `InputError`) with
    one line. The measurements hold the device's lock (`perflab.core.lock`): other learners' measurements wait."""
    from perflab.audit.fp8 import gpu_spec
    from perflab.core.device import pick_device
    from perflab.core.lock import device_lock
    from perflab.core.validate import positive_int

    steps = positive_int("steps", steps)
    dev = pick_device(str(device)) if device is not None else pick_device()
    spec = gpu_spec(gpu) if gpu is not None else None
    with device_lock(dev, label=f"perflab audit of {target.name}"):
        return _audit(target, dev, steps, warmup, try_rungs, explain_breaks, progress, spec)


def fp8_step(built: Any, gpu: str | AcceleratorSpec | None = None,
             device: str | torch.device | None = None) -> Fp8Gains:
    """The audit's fp8 section alone (`perflab.audit.fp8`), from one counted step: `built` is a `Target` or
    what a factory returns (`{'model', 'batches', ...}`). One batch runs forward and backward on `device`
    (default: the best here) under the op table and perflab's FLOP counter, and the step's GEMMs are
    predicted for `gpu` (`perflab.audit.fp8.choose_gpu`). Nothing is timed."""
    from perflab.audit.fp8 import choose_gpu, gains, gpu_spec
    from perflab.audit.ops import OpStats
    from perflab.core.device import describe, pick_device
    from perflab.flops.counter import count_flops

    t = built if isinstance(built, Target) else target_from(built)
    dev = pick_device(str(device)) if device is not None else pick_device()
    spec, note = choose_gpu(gpu_spec(gpu) if gpu is not None else None, describe(dev))
    model = t.model.to(dev)
    model.train()
    loss_fn = t.loss_fn or default_loss
    batch = to_device(BatchSource(t.batches, need=1).next(), dev)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        loss_fn(model, batch).backward()

    stats = OpStats()
    with _user_code(f"a counted step of {t.name}", t.user_file, ["counting FLOPs"], samples_in(batch)), stats:
        fc = count_flops(step)
    model.zero_grad(set_to_none=True)
    return gains(stats.gemm_calls, fc.hardware, spec, note)


def waterfall_of(raw: dict, step_s: float, data_s: float) -> Waterfall:
    """The step's waterfall: the data wait as timed (`data_s`, at most the step), the rest of the median
    step `step_s` split by the profiled trace's (`raw`) shares of its other categories
    (`perflab.tune.waterfall.breakdown_of_trace`); all of it compute when the trace saw none."""
    from perflab.tune.waterfall import breakdown_of_trace

    bd = breakdown_of_trace(raw)
    rest = {k: bd[k] for k in BREAKDOWN if k != "data_wait"}
    total = sum(rest.values())
    return Waterfall({"data_wait": data_s, **{k: (v / total if total else (1.0 if k == "compute" else 0.0))
                                                  * (step_s - data_s) for k, v in rest.items()}})


def _audit(target: Target, dev: torch.device, steps: int, warmup: int, try_rungs: bool, explain_breaks: bool,
           progress: Callable[[str], None] | None, gpu: AcceleratorSpec | None) -> AuditReport:
    from perflab.core.device import describe, synchronize

    say = progress or (lambda _m: None)
    info = describe(dev)
    point = ["moving the model to the device"]
    model = target.model
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
    samples = samples_in(first)
    with _user_code(f"the model's forward/backward (or loss_fn) of {target.name} on its first batch",
                    target.user_file, point, samples):
        losses = [step(first)]
        for _ in range(warmup - 1):
            losses.append(step(fetch()))
        synchronize(dev)
    _finite(losses, "its first batch")
    tokens = tokens_in(first, target.tokens_per_batch, model)
    streams = None if target.tokens_per_batch else token_streams(first, model)

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
            synchronize(dev)
            times.append(time.perf_counter() - t0)
        joules = meter.stop()
    _finite([last], "a timed step")  # read after the clock stopped: no sync inside the timed steps
    timed = StepTime(statistics.median(times), relative_spread(times), tokens, samples)  # spread: IQR / median

    # 3. FLOPs per phase and dtype (perflab's counter), op bytes and product shapes
    from perflab.audit.ops import OpStats
    from perflab.audit.work import count_work
    from perflab.flops.counter import count_flops

    say("counting FLOPs")
    point[0] = "counting FLOPs"
    batch = fetch()
    stats = OpStats()
    with _user_code(f"a counted step of {target.name}", target.user_file, point, samples), stats:
        fc = count_flops(step, batch)
    work = count_work(fc, model, target.hf_config, tokens, streams)
    from perflab.audit.fp8 import choose_gpu, gains

    fp8 = gains(stats.gemm_calls, fc.hardware, *choose_gpu(gpu, info))  # the step's GEMMs, bf16 against fp8

    # 4. one profiled step, read as lesson 09 reads a trace
    from perflab.tune.waterfall import profile_steps

    say("profiling three steps")
    point[0] = "the profiled step"
    with _user_code(f"a profiled step of {target.name}", target.user_file, point, samples):
        # several steps, so that one disturbed step does not decide the breakdown (averaged per step)
        raw = profile_steps(lambda: step(fetch()), dev, steps=PROFILED_STEPS)
    from perflab.profiling.diagnose import diagnose

    profiled = diagnose(raw)
    profile_notes = [n for n in (profiled.versus_timed(timed.step_s),
                                 None if profiled.stable else f"breakdown: {profiled.stability()}") if n]
    # data wait as lesson 07 times it (around next() in the timed steps: the profiler's overhead on small
    # ops would shrink its share); the rest of the step split by the profiled step's shares of the rest
    waterfall = waterfall_of(raw, timed.step_s, min(statistics.median(waits), timed.step_s))

    # 5. utilization, per dtype, against the one basis every MFU shares (perflab.flops.mfu)
    from perflab.audit.ops import bandwidth, top_ops, uncounted
    from perflab.audit.work import float64_cause
    from perflab.flops.mfu import bases_for, utilization
    from perflab.profiling.trace import load

    say("looking up this device's matmul ceiling")
    hw_by = fc.hardware_by_dtype()
    u = utilization(timed.step_s, fc.model_by_dtype(), bases_for(dev, [d for d, n in hw_by.items() if n > 0]), hw_by)
    ceilings = Ceilings(max((b.tflops or 0.0 for b in u.bases.values()), default=0.0) * 1e12, bandwidth(dev) or 0.0)
    trace = load(raw)
    top = top_ops(trace, fc, stats, ceilings)
    work = replace(work, uncounted=uncounted(trace, fc))
    causes = float64_cause(fc, u, dev)

    # 6. memory, per phase
    from perflab.audit.memory import measure_memory

    say("memory")
    point[0] = "the memory step"
    with _user_code(f"a memory step of {target.name}", target.user_file, point, samples):
        mem = measure_memory(model, opt, step, loss_fn, fetch(), dev, target.hf_config, tokens, samples,
                             work.params_total)

    # 7. graph breaks (lesson 10's explain)
    breaks = GraphBreaks([], read=False)
    notes = list(target.notes) + profile_notes
    if explain_breaks:
        from perflab.audit.breaks import graph_breaks

        say("graph breaks")
        breaks, note = graph_breaks(model, loss_fn, batch)
        if note:
            notes.append(note)

    # 8. recommendations
    from perflab.audit import recommend

    apply = recommend.applicable(target, opt, dev, dtypes=list(hw_by), breakdown=waterfall.seconds,
                                 step_s=timed.step_s)
    recs = recommend.ranked(apply, waterfall.seconds)
    if try_rungs and recs:
        say("trying the rungs")
        point[0] = "--try"
        batches = [src.next() for _ in range(6)]
        with _user_code(f"a tried step of {target.name}", target.user_file, point, samples):
            recommend.try_rungs(recs, target, init_state, opt, loss_fn, batches, dev, progress=say)

    energy = Energy(joules / steps if joules is not None else None,
                    meter.reason if joules is None else f"energy by {meter.source}")
    return AuditReport(target.name, f"{info.kind}: {info.name}", timed, work, u, waterfall, top, mem, breaks, energy,
                       recs, ceilings, notes, causes, fp8)


def _finite(losses: list, where: str) -> None:
    """One line, and no report, when a loss is NaN or infinite: every figure of such a step describes a
    run that is not training."""
    for loss in losses:
        if isinstance(loss, torch.Tensor) and not bool(torch.isfinite(loss.detach()).all()):
            raise AuditInputError(f"the loss is {float(loss.detach().float().item())} on {where}: the step does not "
                                  "train, so its timing would describe nothing; fix the model, its inputs or the "
                                  "loss (a learning rate, an unscaled fp16 loss, a log of 0) and run again")
