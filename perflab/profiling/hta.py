"""A cross-check with Meta's HolisticTraceAnalysis (`pip install HolisticTraceAnalysis`) on GPU traces.

HTA reads the same Chrome traces and computes, per rank, a temporal breakdown (compute, non-compute
and idle time of the GPU) and an idle-time breakdown (host wait, kernel wait, other). perflab's
`diagnose` names causes instead; the two should agree on the device's idle share of a GPU trace.
They differ by design: HTA's windows are the whole trace (perflab's are the ProfilerStep ranges),
HTA counts communication kernels as busy "non-compute" time (perflab counts NCCL kernels as
communication idle of the compute), and HTA has no CPU-only notion of a device, so it is skipped
on CPU traces. Not verified on a GPU by this course's tests.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from pathlib import Path
from typing import Any

from perflab.profiling.diagnose import diagnose
from perflab.profiling.trace import load


def skip_reason(trace) -> str | None:
    """Why the cross-check cannot run here, or None."""
    if importlib.util.find_spec("hta") is None:
        return "HolisticTraceAnalysis is not installed (pip install HolisticTraceAnalysis)"
    if not load(trace).on_gpu:
        return "the trace has no GPU kernels: HTA analyses device time, and a CPU trace has none"
    return None


def cross_check(trace_path: str | Path) -> dict[str, Any]:
    """perflab's device busy/idle shares beside HTA's temporal breakdown for rank 0's trace."""
    reason = skip_reason(trace_path)
    if reason:
        return {"skipped": reason}
    from hta.trace_analysis import TraceAnalysis

    folder = Path(tempfile.mkdtemp(prefix="perflab-hta-"))
    shutil.copy(trace_path, folder / "rank0.json")
    ta = TraceAnalysis(trace_dir=str(folder))
    temporal = ta.get_temporal_breakdown(visualize=False)
    row = temporal.iloc[0].to_dict()
    d = diagnose(trace_path)
    hta_idle = float(row.get("idle_time_pctg", float("nan"))) / 100
    return {"perflab_device_busy": d.device_busy, "perflab_idle": 1 - d.device_busy, "hta_idle": hta_idle,
            "hta_compute": float(row.get("compute_time_pctg", float("nan"))) / 100,
            "hta_non_compute": float(row.get("non_compute_time_pctg", float("nan"))) / 100,
            "difference": (1 - d.device_busy) - hta_idle}
