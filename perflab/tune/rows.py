"""A rung's row: the record lesson 11, lab 11 and `perflab tune` read, saved as it is measured.

    >>> row = rung_row(name, change, m, prev, base, basis, tp, device, pair)
    >>> row["verdict"], row["speedup_vs_previous"], row["explain"]

A row is one line of JSON in the ladder's results file (`perflab.core.results`), keyed by its
configuration, so the lesson, the lab and the command read the same measurement of a rung. Its fields
are listed in `perflab.tune.runner`'s docstring; `FIELDS` are those every table shows. Also here: the
rung's MFU and HFU against the basis of its dtype (`mfu_fields`, `perflab.flops.mfu.utilization`), its
loss parity against the baseline (`tolerance_for`, `perflab.compiler.parity`), the sentences that
explain its verdict (`explain`) and whether separate rows' step times can be compared (`drift_note`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from perflab.core.jsonable import JSON
from perflab.flops.mfu import Basis
from perflab.tune.changes import Change
from perflab.tune.config import padded_vocab
from perflab.tune.ladder import TunePreset
from perflab.tune.ladder import rung as rung_of
from perflab.tune.measure import Measurement, PairMeasurement
from perflab.tune.verdict import ADOPT_MIN_GAIN

FIELDS = ("rung", "step_s", "tokens_per_s", "mfu", "hfu", "peak_bytes", "loss_delta", "speedup_vs_baseline")


def step_shape(tp: TunePreset) -> tuple[int, int, int]:
    """(m, n, k) of the preset's largest GEMM at its largest micro-batch: the logits of the whole
    global batch (tokens × padded vocabulary × hidden). For the cpu preset this is
    `perflab.flops.mfu.CEILING_SHAPE_CPU`, the shape every CPU ceiling is measured at."""
    return tp.global_batch * tp.seq, padded_vocab(tp.cfg.vocab), tp.cfg.hidden


def mfu_fields(m: Measurement, basis: Basis) -> JSON:
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


def tolerance_for(dtype: str) -> float:
    from perflab.compiler.parity import tolerance

    return tolerance(torch.bfloat16 if dtype == "bf16" else torch.float32)


def parity_index(tp: TunePreset) -> int:
    """The step whose loss every configuration is compared at: after warmup + steps optimizer steps."""
    return tp.warmup + tp.steps - 1


# the category each rung attacks (its explanation reads this category of the step before it)
ATTACKS = {"bf16": "compute", "adamw": "optimizer", "vocab64": "compute", "sdpa": "compute", "compile": "compute",
           "batch": "compute", "checkpoint": "compute", "loader": "data_wait", "numa": "compute"}


def rung_row(name: str, change: Change, m: Measurement | None, prev: JSON | None, base: JSON | None,
             r: Basis | None, tp: TunePreset, device: torch.device, pair: PairMeasurement | None = None) -> JSON:
    """The row of rung `name` as saved in the results file: its measurement `m` (None: the rung does not
    apply here, and the row repeats `prev`'s figures), against the row of the configuration it changes
    (`prev`) and the baseline's (`base`), its MFU against `r`, and its verdict from `pair` (the
    interleaved timing; None: one timing of each, a point and no interval)."""
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
        dec = pair.decision
        if dec is not None:  # the verdict's why, read off its attributes; its blocks as JSON for the file
            row.update(verdict_reason=dec.reason, busy=dec.busy, blocks=[b.to_json() for b in dec.blocks],
                       blocks_kept=dec.kept, blocks_dropped=dec.dropped)
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
