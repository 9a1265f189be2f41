"""The allocation probe: what a function, or each phase of a training step, allocates, to the byte.

What each device lets us measure honestly:

* **CUDA**: the caching allocator's own counters — `allocated` (bytes in live tensors), `peak`
  (`max_memory_allocated`, reset at the start of every phase), `reserved` (held by the cache) — and
  the device's "used" as NVML (and `nvidia-smi`) report it, which adds the CUDA context, kernels,
  libraries' workspaces and other processes (`perflab.memory.usage`).
* **CPU**: torch's CPU allocator reports every allocation and free to the profiler when
  `profile_memory=True`, so the same `allocated` and `peak` come out *exactly* (to the byte) from the
  profiler's memory events. The process's resident set size (RSS) is shown next to it: it also holds
  the interpreter, libraries, oneDNN/BLAS buffers, and memory that glibc has not returned to the OS,
  and pages count only once touched — a coarse number, good to tens of MB. `tracemalloc` sees only
  Python objects, not tensor storage (shown to make that point). The profiler's own lines on stderr
  (its start and stop, the allocator's notes) are kept off it (`perflab.core.stderr`).

    >>> allocated_during(fn)                     # {'kept_bytes': ..., 'peak_bytes': ...}
    >>> rep = measure_step_phases(preset("small-gpt"), batch=4)
    >>> rep.frame()          # one row per phase: allocated, peak, reserved/NVML (GPU) or RSS (CPU)
    >>> rep.compare()        # predicted (perflab.memory.estimate.step_phases) next to measured

The step is the course's (`perflab.workload.train.StepRunner`), its phases wrapped by the probe.
What the autograd graph keeps, storage by storage, is `perflab.memory.saved`. Gradient checkpointing's
effect is `perflab.memory.recompute`; ipyexperiments' per-cell report `perflab.memory.cells`.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON
from perflab.memory.estimate import MEASURED_OPTIMIZERS, step_phases
from perflab.memory.saved import SavedTensors, saved_tensors  # noqa: F401  (their home is `saved`)
from perflab.memory.usage import (
    cuda_used_bytes,
    nvml_used_bytes,
    reset_rss_peak,
    rss_bytes,
    rss_peak_bytes,
)

MiB = 2**20


# ---------------------------------------------------------------- allocation tracking


class _CPUAllocations:
    """Exact CPU allocator accounting from the profiler's memory events.

    Only allocations made while tracking are counted (blocks allocated earlier are unknown to it),
    so every number is 'bytes allocated since start() that are still alive'. Between start() and
    stop() stderr is filtered (`perflab.core.stderr.quiet_stderr`).
    """

    def __init__(self):
        from torch.profiler import ProfilerActivity, profile

        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False)
        self._marks: list[tuple[str, Any]] = []
        self.events: list[tuple[int, int]] = []

    def start(self):
        from perflab.core.stderr import quiet_stderr

        self._quiet = quiet_stderr()  # the profiler's start/stop lines and allocator notes, until stop()
        self._quiet.__enter__()
        try:
            self._prof.__enter__()
        except BaseException:
            self._quiet.__exit__(None, None, None)
            raise

    def stop(self):
        try:
            self._prof.__exit__(None, None, None)
        finally:
            self._quiet.__exit__(None, None, None)
        prof = self._prof.profiler
        if prof is None or prof.kineto_results is None:  # pragma: no cover - set by __exit__ of a started profile
            raise RuntimeError("the memory profiler recorded nothing")
        evs = prof.kineto_results.events()
        mem = [(e.start_ns(), e.nbytes())  # pyright: ignore[reportAttributeAccessIssue]  # bound in C++, missing from the stub
               for e in evs if e.name() == "[memory]" and e.device_type() == _cpu_type()]
        mem.sort()
        self.events = mem
        self.ranges = sorted((e.start_ns(), e.end_ns(), e.name()) for e in evs if e.name().startswith("perflab-phase:"))

    def phase(self, name: str):
        from torch.profiler import record_function

        return record_function("perflab-phase:" + name)

    def timeline(self) -> tuple[list[int], list[int]]:
        """(ns, bytes alive) after every allocation or free."""
        t, total, out = [], 0, []
        for ns, n in self.events:
            total += n
            t.append(ns)
            out.append(total)
        return t, out

    def per_phase(self) -> list[dict[str, Any]]:
        rows, i, total = [], 0, 0
        for start, end, name in self.ranges:
            begin = total
            while i < len(self.events) and self.events[i][0] < start:
                total += self.events[i][1]
                i += 1
            begin = total
            peak = total
            while i < len(self.events) and self.events[i][0] <= end:
                total += self.events[i][1]
                peak = max(peak, total)
                i += 1
            rows.append({"mark": name.split(":", 1)[1], "start_bytes": begin, "allocated_bytes": total, "peak_bytes": peak})
        return rows


def _cpu_type():
    try:
        from torch._C._autograd import DeviceType

        return DeviceType.CPU
    except Exception:  # pragma: no cover
        return 0


def allocated_during(fn: Callable[[], Any], device=None) -> dict[str, int]:
    """Run `fn()` and return {'kept_bytes': allocated at the end minus at the start, 'peak_bytes':
    the highest rise above the start}, from the CUDA allocator or (CPU) the profiler's memory
    events. The result of `fn` is kept alive until the end, so what it holds counts as kept."""
    import torch

    from perflab.core.device import pick_device, synchronize

    dev = pick_device(device) if device is None or isinstance(device, str) else device
    if dev.type == "cuda":
        warm_up_libraries(dev)
        synchronize(dev)
        gc.collect()
        base = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        out = fn()
        synchronize(dev)
        kept = torch.cuda.memory_allocated(dev) - base
        peak = torch.cuda.max_memory_allocated(dev) - base
        del out
        return {"kept_bytes": int(kept), "peak_bytes": int(peak)}
    tr = _CPUAllocations()
    tr.start()
    try:
        with tr.phase("run"):
            out = fn()
    finally:
        tr.stop()
    row = tr.per_phase()[0]
    del out
    return {"kept_bytes": row["allocated_bytes"] - row["start_bytes"], "peak_bytes": row["peak_bytes"] - row["start_bytes"]}


# ---------------------------------------------------------------- a training step, phase by phase


def warm_up_libraries(device, dtype=None) -> int:
    """Run one small matmul forward+backward and one attention call on a CUDA device, so that
    cuBLAS/cuBLASLt take their workspaces from the caching allocator *before* a measurement starts;
    returns the bytes they kept (allocated after − before). They stay allocated for the life of the
    process: a remainder no formula for the model contains."""
    import torch
    import torch.nn.functional as F

    dev = torch.device(device)
    if dev.type != "cuda":
        return 0
    dtype = dtype or torch.float32
    torch.cuda.synchronize(dev)
    before = torch.cuda.memory_allocated(dev)
    w = torch.randn(64, 64, device=dev, dtype=dtype, requires_grad=True)
    x = torch.randn(8, 4, 32, 16, device=dev, dtype=dtype, requires_grad=True)
    (torch.randn(32, 64, device=dev, dtype=dtype) @ w).sum().backward()
    F.scaled_dot_product_attention(x, x, x, is_causal=True).sum().backward()
    torch.cuda.synchronize(dev)
    del w, x
    return int(torch.cuda.memory_allocated(dev) - before)


PRECISIONS_MEASURED = ("fp32", "bf16")


def torch_dtype(name: str):
    """torch's dtype for a precision the probe measures ('fp32', 'bf16'; 'fp16')."""
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


# how close the phase model comes, by device: (at phase boundaries, for peaks inside a phase), as fractions.
# A CPU's allocator asks for exactly each tensor's bytes: exact at boundaries, peaks within the temporaries the
# model names. A GPU's caching allocator rounds blocks, cuBLAS and attention kernels take workspaces.
PHASE_TOLERANCE = {"cpu": (0.0, 0.005), "cuda": (0.03, 0.15)}


@dataclass(frozen=True)
class Agreement:
    """The phase model against a measured step: the worst gaps and the tolerances they are held to."""

    device_kind: str  # 'cpu' or 'cuda'
    worst_end: float  # relative gap at a phase boundary
    worst_peak: float  # relative gap of a peak inside a phase
    tolerance_end: float
    tolerance_peak: float

    @property
    def holds(self) -> bool:
        return self.worst_end <= self.tolerance_end and self.worst_peak <= self.tolerance_peak

    def text(self) -> str:
        from perflab.core.readout import percent

        def pct(x: float) -> str:
            return "0 %" if x == 0 else percent(x)

        return (f"worst gap at a phase boundary: {pct(self.worst_end)} (tolerance {pct(self.tolerance_end)}); worst peak "
                f"gap: {pct(self.worst_peak)} (tolerance {pct(self.tolerance_peak)}): "
                + ("within both" if self.holds else "outside the tolerance: the phase model misses something here"))


@dataclass
class PhaseReport:
    """Measured rows (one per phase) with the prediction that goes with them."""

    rows: list[dict[str, Any]]
    predicted: list[Any]  # perflab.memory.estimate.StepPhase
    meta: dict[str, Any] = field(default_factory=dict)

    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows)

    def compare(self):
        """Predicted vs measured per phase, in MiB, with the gaps."""
        import pandas as pd

        out = []
        for r, p in zip(self.rows, self.predicted):
            row = {"phase": r["phase"], "iteration": r["iteration"],
                   "predicted end (MiB)": p.end_bytes / MiB, "measured end (MiB)": r["allocated_bytes"] / MiB,
                   "predicted peak (MiB)": p.peak_bytes / MiB, "measured peak (MiB)": r["peak_bytes"] / MiB,
                   "peak gap": (r["peak_bytes"] - p.peak_bytes) / p.peak_bytes if p.peak_bytes else 0.0}
            if "reserved_bytes" in r:
                row["reserved (MiB)"] = r["reserved_bytes"] / MiB
            if r.get("device_used_bytes") is not None:
                row["NVML used (MiB)"] = r["device_used_bytes"] / MiB
            if r.get("rss_bytes") is not None:
                row["RSS (MiB)"] = r["rss_bytes"] / MiB
            out.append(row)
        return pd.DataFrame(out)

    def compare_table(self):
        """`compare` as a person reads it: MiB to the digits the allocator's bytes have, the peak gap in percent."""
        from perflab.core.readout import num, percent

        df = self.compare()
        return df.assign(**{c: [num(v, 4) for v in df[c]] for c in df.columns if c.endswith("(MiB)")},
                         **{"peak gap": [percent(v) for v in df["peak gap"]]})

    @property
    def peak_bytes(self) -> int:
        return max(r["peak_bytes"] for r in self.rows)

    @property
    def on_gpu(self) -> bool:
        """Measured by a CUDA caching allocator (its rows carry reserved bytes), not a CPU's profiler."""
        return bool(self.rows) and self.rows[0].get("reserved_bytes") is not None

    @property
    def steady_peak_bytes(self) -> int:
        """The peak of the last iteration: the steady-state step (the first one also creates the optimizer's states)."""
        last = max(r["iteration"] for r in self.rows)
        return max(r["peak_bytes"] for r in self.rows if r["iteration"] == last)

    def agreement(self) -> Agreement:
        """The worst relative gap between prediction and measurement, at phase boundaries and for the peaks
        inside phases, against the tolerance for this device (`PHASE_TOLERANCE`)."""
        kind = "cuda" if self.on_gpu else "cpu"
        end = max(abs(r["allocated_bytes"] - q.end_bytes) / q.end_bytes for r, q in zip(self.rows, self.predicted)
                  if q.end_bytes)
        peak = max(abs(r["peak_bytes"] - q.peak_bytes) / q.peak_bytes for r, q in zip(self.rows, self.predicted)
                   if q.peak_bytes)
        return Agreement(kind, end, peak, *PHASE_TOLERANCE[kind])

    def outside_table(self):
        """What lies outside torch's allocator, per phase. On a CPU: the change in allocated bytes beside the
        change in the process's RSS, the peak above the phase's start, and the Python heap's peak (tracemalloc).
        On a GPU: allocated, peak, reserved by the cache, and the device's used memory (NVML, the driver)."""
        import pandas as pd

        from perflab.core.readout import num

        def mib(b):
            return "–" if b is None else num(b / MiB, 4)

        rows = []
        for r in self.rows:
            row = {"phase": f"{r['phase']} {r['iteration']}"}
            if self.on_gpu:
                row.update({"allocated (MiB)": mib(r["allocated_bytes"]), "peak (MiB)": mib(r["peak_bytes"]),
                            "reserved (MiB)": mib(r["reserved_bytes"]), "NVML used (MiB)": mib(r.get("device_used_bytes")),
                            "driver used (MiB)": mib(r.get("driver_used_bytes"))})
            else:
                rss = None if r.get("rss_bytes") is None or r.get("rss_start_bytes") is None else \
                    r["rss_bytes"] - r["rss_start_bytes"]
                row.update({"Δ allocated (MiB)": mib(r["allocated_bytes"] - r["start_bytes"]), "Δ RSS (MiB)": mib(rss),
                            "peak above start (MiB)": mib(r["peak_bytes"] - r["start_bytes"]),
                            "Python heap peak above start, tracemalloc (MiB)": mib(r.get("python_heap_peak_bytes"))})
            rows.append(row)
        return pd.DataFrame(rows)

    def workspace_text(self) -> str | None:
        """On a GPU, the cuBLAS/cuBLASLt workspaces the warm-up before the first phase took; None elsewhere."""
        if not self.on_gpu:
            return None
        from perflab.core.readout import binary_bytes

        ws = self.meta.get("library_workspace_bytes")
        return (f"cuBLAS/cuBLASLt workspaces newly kept by the warm-up before the first phase: {binary_bytes(ws or 0)}"
                + ("" if ws else " (an earlier matmul in this process already took them: they are in the starting point)"))

    def summary(self) -> JSON:
        """The step in numbers: its loss, the last iteration's seconds per phase and in all
        (`step_s`), peak bytes measured and predicted, and the per-phase rows (what
        `perflab memory --measure --json` prints)."""
        last = max(r["iteration"] for r in self.rows)
        secs = {r["phase"]: r["seconds"] for r in self.rows if r["iteration"] == last}
        keep = ("phase", "iteration", "seconds", "start_bytes", "allocated_bytes", "peak_bytes", "reserved_bytes",
                "device_used_bytes", "rss_bytes")
        meta = {k: v for k, v in self.meta.items() if k not in ("timeline", "phase_ranges")}
        return {**meta, "step_s": sum(secs.values()), "forward_s": secs.get("forward"),
                "backward_s": secs.get("backward"), "optimizer_s": secs.get("optimizer step"),
                "peak_bytes": self.peak_bytes, "predicted_peak_bytes": self.predicted_peak_bytes,
                "components_bytes": self.components(),
                "phases": [{k: r[k] for k in keep if k in r} | {"predicted_end_bytes": p.end_bytes,
                                                                 "predicted_peak_bytes": p.peak_bytes}
                           for r, p in zip(self.rows, self.predicted)]}

    @property
    def predicted_peak_bytes(self) -> int:
        return max(p.peak_bytes for p in self.predicted)

    def components(self) -> dict[str, int]:
        """Measured model states and activations, read off the phase boundaries of the last
        iteration: weights (after build), activations (kept by the forward), gradients (left by
        the backward once the activations are gone), optimizer states (kept after zero_grad)."""
        rows = {(r["phase"], r["iteration"]): r for r in self.rows}
        last = max(r["iteration"] for r in self.rows)
        build = rows[("build", 0)]["allocated_bytes"]
        fwd = rows[("forward", last)]
        bwd = rows[("backward", last)]
        zero = rows[("zero_grad", last)]
        states = zero["allocated_bytes"] - build
        return {"weights + batch": build, "optimizer states": states,
                "gradients": bwd["allocated_bytes"] - fwd["start_bytes"],
                "activations": fwd["allocated_bytes"] - fwd["start_bytes"]}


def measure_step_phases(cfg, *, batch: int, seq: int | None = None, dtype: str = "fp32", optimizer: str = "adamw",
                        checkpointing: bool = False, device=None, iterations: int = 2, seed: int = 0) -> PhaseReport:
    """Build perflab's model, then run `iterations` training steps, measuring each phase.

    Phases: build (model, optimizer object, one batch of token ids), then per iteration forward
    (to the loss), backward, optimizer step and zero_grad (gradients set to None). The first step
    creates the optimizer's states, so the second iteration is the steady state. Rows hold bytes
    allocated since the start (`allocated_bytes` at the phase's end, `peak_bytes` inside it, and
    `start_bytes`); GPU rows add `reserved_bytes` and `device_used_bytes` (NVML), CPU rows add
    `rss_bytes`, `rss_peak_bytes` and `python_heap_peak_bytes` (tracemalloc's peak above the phase's start).
    """
    import torch

    from perflab.core.device import describe, pick_device, synchronize
    from perflab.core.validate import positive_int
    from perflab.workload.models import build_model
    from perflab.workload.optim import make_optimizer
    from perflab.workload.train import StepRunner, make_batches

    dev = pick_device(device) if device is None or isinstance(device, str) else torch.device(device)
    if dtype not in PRECISIONS_MEASURED:
        raise InputError(f"measured precisions are {', '.join(PRECISIONS_MEASURED)} (pure: weights, activations, "
                         f"gradients and optimizer states in that dtype); got {dtype!r}")
    if dtype == "bf16":
        from perflab.core.dtypes import check_supported, parse_dtype

        check_supported(parse_dtype("bf16"), dev)
    b = positive_int("batch", batch)
    s = positive_int("seq", seq if seq is not None else cfg.seq_len, maximum=cfg.seq_len)
    if optimizer not in MEASURED_OPTIMIZERS:
        raise InputError(f"measured optimizers are {', '.join(MEASURED_OPTIMIZERS)} (got {optimizer!r})")
    predicted = step_phases(cfg, b, s, dtype=dtype, optimizer=optimizer, recompute="full" if checkpointing else "none",
                            device=dev.type, iterations=iterations)
    from perflab.core.device import free_memory_bytes
    from perflab.core.validate import fits_in_memory

    fits_in_memory(f"a training step of {cfg.name} at batch {b}", max(p.peak_bytes for p in predicted),
                   free_memory_bytes(dev))
    rows: list[dict[str, Any]] = []
    gc.collect()
    workspace = None
    base = 0
    tracing = True
    cpu: _CPUAllocations | None = None
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        workspace = warm_up_libraries(dev, torch_dtype(dtype))
        base = torch.cuda.memory_allocated(dev)
        cpu = None
    else:
        import tracemalloc

        cpu = _CPUAllocations()
        tracing = tracemalloc.is_tracing()
        if not tracing:
            tracemalloc.start()
        cpu.start()

    @contextlib.contextmanager
    def phase(name: str, iteration: int):
        t0 = time.perf_counter()
        row: dict[str, Any] = {"phase": name, "iteration": iteration}
        if dev.type == "cuda":
            synchronize(dev)
            row["start_bytes"] = torch.cuda.memory_allocated(dev) - base
            torch.cuda.reset_peak_memory_stats(dev)
            yield
            synchronize(dev)
            row["allocated_bytes"] = torch.cuda.memory_allocated(dev) - base
            row["peak_bytes"] = torch.cuda.max_memory_allocated(dev) - base
            row["reserved_bytes"] = torch.cuda.memory_reserved(dev)
            row["reserved_peak_bytes"] = torch.cuda.max_memory_reserved(dev)
            row["device_used_bytes"] = nvml_used_bytes(dev)
            row["driver_used_bytes"] = cuda_used_bytes(dev)
        else:
            import tracemalloc

            reset_rss_peak()
            row["rss_start_bytes"] = rss_bytes()
            heap_start = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            assert cpu is not None  # set up above for every device but cuda
            with cpu.phase(f"{name}#{iteration}"):
                yield
            row["rss_bytes"] = rss_bytes()
            row["rss_peak_bytes"] = rss_peak_bytes()
            # above the phase's start, as peak_bytes − start_bytes is: the heap already held (the model's
            # Python objects, earlier phases' records) is not this phase's
            row["python_heap_peak_bytes"] = tracemalloc.get_traced_memory()[1] - heap_start
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)

    model = opt = data = runner = None
    last_loss = None
    try:
        with phase("build", 0):
            model = build_model(cfg, device=dev, dtype=torch_dtype(dtype), seed=seed)
            opt = make_optimizer(model.parameters(), optimizer)
            data = make_batches(cfg, b, s, device=dev, seed=seed)[0]
            # the course's step, each phase inside `phase`; keep_loss=False: the loss is read between the
            # forward and backward phases and freed in the backward, as the estimate frees it
            runner = StepRunner(model, opt, device=dev, checkpointing=checkpointing, keep_loss=False,
                                phase=lambda name, done: phase(name, done + 1))
        for _ in range(positive_int("iterations", iterations)):
            runner.step([data])
        last_loss = runner.last_loss
    finally:
        if cpu is not None:
            import tracemalloc

            cpu.stop()
            if not tracing:
                tracemalloc.stop()
        info = describe(dev)
        n_params = sum(p.numel() for p in model.parameters()) if model is not None else None
        del model, opt, data, runner
        gc.collect()
    if cpu is not None:
        for row, ph in zip(rows, cpu.per_phase()):
            row.update(start_bytes=ph["start_bytes"], allocated_bytes=ph["allocated_bytes"], peak_bytes=ph["peak_bytes"])
        timeline = cpu.timeline()
        ranges = [(a, b) for a, b, _ in cpu.ranges]
    else:
        timeline = ranges = None
    meta = {"device": info.name, "device_kind": dev.type, "library_workspace_bytes": workspace, "model": cfg.name, "params": n_params, "batch": b, "seq": s,
            "dtype": dtype, "optimizer": optimizer, "checkpointing": checkpointing, "timeline": timeline,
            "phase_ranges": ranges, "loss": last_loss}
    return PhaseReport(rows, predicted, meta)
