"""Which of the capstone's rungs (`perflab.tune.ladder.RUNGS`) apply to the learner's step, ordered by
what the waterfall says each can save, and (with --try) each measured on the step with loss parity.

A rung acts on one part of the step's time (lesson 11's waterfall categories): bf16, the padded
vocabulary, SDPA and the larger micro-batch on *compute*; the fused/foreach AdamW on *optimizer*;
torch.compile on *launch overhead* and *compute*; DataLoader workers on *data wait*
(`perflab.tune.levers.ACTS_ON`, read in the waterfall's categories, `perflab.tune.waterfall.CATEGORIES`).
The seconds of those parts are the most a rung can save; rungs are ordered by them (`ranked`, a list of
`perflab.audit.report.Recommendation`). A rung is measured, with --try, as lesson 11 measures it:
the same starting weights and batches, a few steps each, the loss after each step compared with the
unchanged step's within the dtype's tolerance; it is kept only when parity holds and the step is
faster by more than 2 % (less is timing noise). Every timed run is
watched (`perflab.core.quietness`): when other programs disturbed the rung's run or the run it is
compared with, the row says "inconclusive: the machine was busy (…)" instead of keeping or not
keeping it, and carries that quietness (`verdict`, `quietness`).
"""

from __future__ import annotations

import copy
import inspect
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from perflab.audit.report import Recommendation
from perflab.audit.target import Target, to_device
from perflab.tune.waterfall import LABELS

TRIABLE = ("bf16", "adamw", "sdpa", "compile", "loader")
NOISE = 0.02


@dataclass
class Applicable:
    rung: str
    reason: str  # why it applies to this step


def _for_loop_adam(opt: torch.optim.Optimizer) -> bool:
    if not isinstance(opt, (torch.optim.Adam, torch.optim.AdamW)):
        return False
    d = opt.defaults
    if d.get("fused") or d.get("foreach"):
        return False
    # foreach=None: torch picks foreach only when every parameter is on a CUDA device
    on_cuda = all(p.is_cuda for g in opt.param_groups for p in g["params"])
    return not (d.get("foreach") is None and on_cuda)


def supports_sdpa(model: torch.nn.Module) -> bool:
    """Whether a Hugging Face model class can run SDPA attention (`_supports_sdpa`, which transformers
    itself checks before it switches; Gemma2's is False: its attention soft-caps the scores, which SDPA
    cannot do)."""
    return bool(getattr(model, "_supports_sdpa", False))


def applicable(target: Target, opt: torch.optim.Optimizer, device: torch.device, *, dtypes: Sequence[str],
               breakdown: dict[str, float], step_s: float) -> list[Applicable]:
    """The rungs that apply to this step, with the reason each does."""
    from perflab.tune.runner import native_bf16

    out = []
    cfg = target.hf_config
    if dtypes and all(d in ("fp32", "tf32") for d in dtypes):
        ok, why = native_bf16(device)
        if ok:
            out.append(Applicable("bf16", "every product ran in fp32 and this device multiplies bf16 natively"))
    if _for_loop_adam(opt):
        out.append(Applicable("adamw", f"{type(opt).__name__} runs its for-loop implementation (neither fused nor foreach)"))
    vocab = getattr(cfg, "vocab_size", None)
    if isinstance(vocab, int) and vocab % 64:
        out.append(Applicable("vocab64", f"vocabulary {vocab} is not a multiple of 64"))
    impl = getattr(getattr(target.model, "config", cfg), "_attn_implementation", None)
    if impl == "eager" and supports_sdpa(target.model):
        out.append(Applicable("sdpa", "the model's attention is written out (attn_implementation 'eager')"))
    if not hasattr(target.model, "_orig_mod"):
        out.append(Applicable("compile", "the model runs eagerly (not torch.compile'd)"))
    if step_s and breakdown.get("launch_overhead", 0.0) / step_s >= 0.10:
        out.append(Applicable("batch", "launch overhead is a large share of the step: larger batches pay it less often"))
    loader = target.batches
    if step_s and breakdown.get("data_wait", 0.0) / step_s >= 0.05 and isinstance(loader, torch.utils.data.DataLoader) \
            and loader.num_workers == 0:
        out.append(Applicable("loader", "the step waits for data and the DataLoader reads in the training loop "
                                        "(num_workers=0)"))
    return out


def acts_on(rung: str) -> tuple[str, ...]:
    """The waterfall categories (`perflab.tune.waterfall.CATEGORIES`) a rung acts on: `perflab.tune.levers.ACTS_ON`
    (default compute)."""
    from perflab.tune.levers import ACTS_ON

    return ACTS_ON.get(rung, ("compute",))


def ranked(items: list[Applicable], breakdown: dict[str, float]) -> list[Recommendation]:
    """Recommendations ordered by the seconds of the waterfall parts each rung acts on (largest first);
    `breakdown` is seconds per waterfall category."""
    from perflab.tune.ladder import rung

    rows = []
    for a in items:
        parts = acts_on(a.rung)
        can = sum(breakdown.get(p, 0.0) for p in parts)
        r = rung(a.rung)
        why = (f"{a.reason}; acts on {' + '.join(LABELS.get(p, p) for p in parts)}, "
               f"{can * 1e3:.3g} ms of the step by the waterfall; {r.why} (lesson {r.lesson})")
        rows.append(Recommendation(a.rung, why, can))
    rows.sort(key=lambda r: -r.can_save_s)
    return rows


# ---------------------------------------------------------------- --try


def _timed_losses(model, opt, batches: Sequence[Any], loss_fn, device, autocast_dtype=None, fetch=None,
                  warmup: int = 1) -> tuple[list[float], float]:
    """(loss after each step, median step seconds) over `batches` (or `fetch()` for each step)."""
    from perflab.core.device import synchronize

    ctx = (lambda: torch.autocast(device.type, dtype=autocast_dtype)) if autocast_dtype else nullcontext
    losses, times = [], []
    for i, b in enumerate(batches):
        t0 = time.perf_counter()
        if fetch is not None:
            b = fetch()
        b = to_device(b, device)
        opt.zero_grad(set_to_none=True)
        with ctx():
            loss = loss_fn(model, b)
        loss.backward()
        opt.step()
        synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach().float()))
    return losses, statistics.median(times) if times else float("nan")


def try_rungs(rows: list[Recommendation], target: Target, init_state: dict[str, Any], opt: torch.optim.Optimizer,
              loss_fn: Callable, batches: Sequence[Any], device: torch.device, *,
              progress: Callable[[str], None] | None = None) -> None:
    """Measure each triable rung in `rows` on the learner's step (sets each one's measured_speedup,
    parity_ok, quietness and verdict, and adds to its why)."""
    from perflab.tune.runner import fused_adamw_available, tolerance_for

    model = target.model

    def fresh_opt(**kw):
        model.load_state_dict(init_state)
        takes = inspect.signature(type(opt).__init__).parameters  # defaults may hold keys the constructor refuses
        defaults = {k: v for k, v in opt.defaults.items() if k in takes and k not in ("fused", "foreach", "differentiable")}
        return type(opt)(model.parameters(), **defaults, **kw)

    from perflab.core.quietness import Quietness, watch

    say = progress or (lambda _m: None)
    say("try: the unchanged step")
    with watch(device) as w_base:
        base_losses, base_s = _timed_losses(model, fresh_opt(), batches, loss_fn, device)
    for row in rows:
        name = row.rung
        if name not in TRIABLE:
            row.why += "; not measured: --try cannot apply it to a factory's step"
            continue
        say(f"try: {name}")
        m_model, fetch, dtype_name, autocast_dtype, kw = model, None, "fp32", None, {}
        restore: Callable[[], None] = lambda: None  # noqa: E731
        try:
            if name == "bf16":
                autocast_dtype, dtype_name = torch.bfloat16, "bf16"
            elif name == "adamw":
                kw = {"fused": True} if fused_adamw_available(device) else {"foreach": True}
            elif name == "sdpa":
                mcfg: Any = getattr(model, "config", None)
                before = str(mcfg._attn_implementation)
                _set_attn(model, "sdpa")
                restore = lambda before=before: _set_attn(model, before)  # noqa: E731
            elif name == "compile":
                m_model = torch.compile(model)
            elif name == "loader":
                fetch = _worker_fetch(target.batches)
            o = fresh_opt(**kw)
            lf = loss_fn if m_model is model else (lambda _m, b, mm=m_model: loss_fn(mm, b))
            with watch(device) as w:
                losses, s = _timed_losses(m_model, o, batches, lf, device, autocast_dtype, fetch,
                                          warmup=3 if name == "compile" else 1)
            ref_losses, ref_s, ref_q = base_losses, base_s, w_base.result
            if name == "loader":  # against the same step reading its data in the loop, as the learner's does
                with watch(device) as w_ref:
                    ref_losses, ref_s = _timed_losses(model, fresh_opt(), batches, loss_fn, device,
                                                      fetch=_in_loop_fetch(target.batches))
                ref_q = w_ref.result
        except Exception as e:  # noqa: BLE001 - a rung that cannot run on this step is reported, not fatal
            row.why += f"; --try could not run it: {type(e).__name__}: {' '.join(str(e).split())[:160]}"
            continue
        finally:
            restore()
            if name == "compile":
                torch._dynamo.reset()
        tol = tolerance_for(dtype_name)
        sequential = name != "loader" or _sequential(target.batches)
        ok = all(abs(a - b) <= tol * max(abs(b), 1e-12) for a, b in zip(losses, ref_losses)) if sequential else None
        speedup = ref_s / s if s > 0 else None
        row.measured_speedup, row.parity_ok = speedup, ok
        q = Quietness.combine([ref_q, w.result])
        row.quietness = q
        kept = ok is not False and speedup is not None and speedup > 1 + NOISE
        busy = q.disturbed and ok is not False  # a broken parity needs no timing to be refused
        row.verdict = "inconclusive" if busy else ("keep it" if kept else "not kept")
        row.why += f"; tried: {speedup:.3g}× the step, " + (
            "loss parity held" if ok else ("loss parity not checked (shuffled data)" if ok is None else
                                           f"loss parity FAILED (tolerance {tol:g})")) + (
            f"; inconclusive: the machine was busy ({q.cause})" if busy else ("; keep it" if kept else "; not kept"))
    model.load_state_dict(init_state)


def _set_attn(model, impl: str) -> None:
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(impl)
    else:
        model.config._attn_implementation = impl


def _sequential(loader) -> bool:
    return isinstance(getattr(loader, "sampler", None), torch.utils.data.SequentialSampler)


def _in_loop_fetch(loader):
    state = {"it": iter(loader)}

    def fetch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(loader)
            return next(state["it"])
    return fetch


def _worker_fetch(loader):
    """next() of a copy of the learner's DataLoader read by 2 worker processes (prefetching)."""
    dl = torch.utils.data.DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=copy.copy(loader.sampler),
                                     collate_fn=loader.collate_fn, num_workers=2, persistent_workers=False,
                                     pin_memory=torch.cuda.is_available(), drop_last=loader.drop_last)
    state = {"it": iter(dl)}

    def fetch():
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = iter(dl)
            return next(state["it"])
    return fetch
