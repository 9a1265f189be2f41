"""Helpers the tests of this folder share."""

from perflab.memory import estimate as E
from perflab.memory import probe

MiB = 2**20


def _gpu_report(*, used: int | None = 900 * MiB) -> probe.PhaseReport:
    """Two iterations as measure_step_phases reports them on a GPU: allocator rows with reserved
    bytes and NVML's used bytes, each phase measured at exactly its prediction."""
    w, b, a, g, st = 100 * MiB, 1 * MiB, 50 * MiB, 100 * MiB, 200 * MiB
    plan = [("build", 0, {"weights": w, "batch": b}, 0)]
    for it in (1, 2):
        o = st if it > 1 else 0  # the first step creates the optimizer's states
        plan += [("forward", it, {"weights": w, "batch": b, "optimizer_states": o, "activations": a}, 30 * MiB),
                 ("backward", it, {"weights": w, "batch": b, "optimizer_states": o, "gradients": g}, 0),
                 ("optimizer step", it, {"weights": w, "batch": b, "optimizer_states": st, "gradients": g}, 100 * MiB),
                 ("zero_grad", it, {"weights": w, "batch": b, "optimizer_states": st}, 0)]
    predicted, rows, start = [], [], 0
    for phase, it, parts, extra in plan:
        end = sum(parts.values())
        p = E.StepPhase(phase, it, end, max(start, end) + extra, parts, "")
        predicted.append(p)
        rows.append({"phase": phase, "iteration": it, "start_bytes": start, "allocated_bytes": end,
                     "peak_bytes": p.peak_bytes, "reserved_bytes": p.peak_bytes + 8 * MiB,
                     "reserved_peak_bytes": p.peak_bytes + 16 * MiB, "device_used_bytes": used, "seconds": 0.01})
        start = end
    meta = {"model": "tiny-gpt", "batch": 2, "seq": 32, "dtype": "fp32", "optimizer": "adamw",
            "checkpointing": False, "device": "test GPU", "timeline": None, "phase_ranges": None}
    return probe.PhaseReport(rows, predicted, meta)
