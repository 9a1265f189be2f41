"""Lesson 07's live panel: each change of a slider measures the data wait again (0 workers and the chosen
count) and says what the measurement shows beside the model's recommendation.

    >>> table, text = live(5, 0, 20, 2, batch=4, batches=10, device=torch.device("cpu"), cores=2)

The lesson wraps `live` in a `perflab.course.widgets.Panel` (its sliders: IO and transform milliseconds per
sample, the step's compute milliseconds, the workers) and calls it once more for a second setting.
"""

from __future__ import annotations

from typing import Any


def live(io_ms: float, transform_ms: float, compute_ms: float, workers: int, *, batch: int, batches: int, device: Any,
         cores: int) -> tuple[Any, str]:
    """(the measured table, the verdict): 0 workers and `workers`, each a fresh DataLoader, `batches` steps."""
    from perflab.dataloading import compute, loader, starvation, verdict
    from perflab.dataloading.waits import WorkerSweep

    step = compute.calibrate(compute_ms, device, budget_s=0.05)
    res = loader.sweep_workers(sorted({0, int(workers)}), batch=batch, batches=batches, io_ms=io_ms,
                               transform_ms=transform_ms, step=step, timeout=30)
    rec = starvation.recommend(batch, io_ms / 1e3, transform_ms / 1e3, compute_ms / 1e3, cores=cores,
                               compute_on_cpu=device.type != "cuda")
    return WorkerSweep.from_sweep(res).table(), verdict.measured_verdict(res.frame, rec.reason)
