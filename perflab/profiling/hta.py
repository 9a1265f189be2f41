"""A cross-check with Meta's HolisticTraceAnalysis (`pip install HolisticTraceAnalysis`) on GPU traces.

HTA reads the same Chrome traces and computes, per rank, a temporal breakdown (compute, non-compute
and idle time of the GPU) and an idle-time breakdown (host wait, kernel wait, other). perflab's
`diagnose` names causes instead; the two should agree on the device's idle share of a GPU trace.
They differ by design: HTA's windows are the whole trace (perflab's are the ProfilerStep ranges),
HTA counts communication kernels as busy "non-compute" time (perflab counts NCCL kernels as
communication idle of the compute), and HTA has no CPU-only notion of a device, so it is skipped
on CPU traces.

What the tests check, on hand-built GPU-style traces only (`trace.synthetic_step(..., on_gpu=True)`;
not verified on a real GPU trace): where the idle time lies between a step's kernels (host syncs,
tiny kernels, communication counted as HTA's idle + non-compute) the two agree to within the step
edges perflab counts and HTA does not (≈ 6 points there); idle time *before* a step's first kernel
— the data wait — is outside HTA's per-iteration kernel span, so HTA reports far less idle than
perflab for a loader-bound step.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from perflab.profiling.diagnose import diagnose
from perflab.profiling.trace import load


def skip_reason(trace) -> str | None:
    """Why the cross-check cannot run here, or None."""
    if importlib.util.find_spec("hta") is None:
        return "HolisticTraceAnalysis is not installed (pip install HolisticTraceAnalysis)"
    if not load(trace).on_gpu:
        return "the trace has no GPU kernels: HTA analyses device time, and a CPU trace has none"
    return None


@dataclass
class CrossCheck:
    """perflab's device shares beside HTA's (each a share of the time, 0..1), or why there are none."""

    skipped: str | None = None  # why the cross-check could not run; the figures are None then
    perflab_device_busy: float | None = None
    perflab_idle: float | None = None
    hta_idle: float | None = None
    hta_compute: float | None = None
    hta_non_compute: float | None = None
    # perflab counts communication kernels as idle time of the compute: compare like with like
    hta_idle_plus_non_compute: float | None = None
    difference: float | None = None  # perflab's idle minus HTA's idle + non-compute


def cross_check(trace_path: str | Path) -> CrossCheck:
    """perflab's device busy/idle shares beside HTA's temporal breakdown for rank 0's trace."""
    reason = skip_reason(trace_path)
    if reason:
        return CrossCheck(skipped=reason)
    import contextlib
    import io
    import json
    import logging
    import warnings

    from perflab.core.extras import need

    TraceAnalysis = need("hta.trace_analysis", "hta", "the HTA cross-check").TraceAnalysis

    t = load(trace_path)
    raw = dict(t.raw)
    raw.setdefault("distributedInfo", {"rank": 0})
    folder = Path(tempfile.mkdtemp(prefix="perflab-hta-"))
    (folder / "rank0.json").write_text(json.dumps(raw))
    quiet = io.StringIO()
    level = logging.getLogger().level
    try:
        logging.getLogger().setLevel(logging.ERROR)
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), warnings.catch_warnings():
            # HTA's own pandas calls (inplace=...) warn under pandas 3.1; nothing for the reader to do
            warnings.filterwarnings("ignore", module=r"hta(\.|$)")
            ta = TraceAnalysis(trace_dir=str(folder))
            temporal = ta.get_temporal_breakdown(visualize=False)
    finally:
        logging.getLogger().setLevel(level)
        shutil.rmtree(folder, ignore_errors=True)
    row = temporal.iloc[0].to_dict()
    d = diagnose(t)
    hta_idle = float(row.get("idle_time_pctg", float("nan"))) / 100
    non_compute = float(row.get("non_compute_time_pctg", float("nan"))) / 100
    return CrossCheck(perflab_device_busy=d.device_busy, perflab_idle=1 - d.device_busy, hta_idle=hta_idle,
                      hta_compute=float(row.get("compute_time_pctg", float("nan"))) / 100, hta_non_compute=non_compute,
                      hta_idle_plus_non_compute=hta_idle + non_compute,
                      difference=(1 - d.device_busy) - (hta_idle + non_compute))


def cross_check_line(trace_path: str | Path) -> str:
    """`cross_check` in a sentence, or why it did not run on this trace."""
    from perflab.core.readout import percent

    r = cross_check(trace_path)
    if r.skipped:
        return f"not on this trace: {r.skipped}"
    return (f"perflab: device idle {percent(r.perflab_idle)}; HTA: idle {percent(r.hta_idle)} + non-compute "
            f"{percent(r.hta_non_compute)} (difference {percent(r.difference)})")
