"""GPU memory that no formula predicts: kernels, the CUDA context, NCCL, fragmentation.

Each experiment that depends on process-wide settings runs in a fresh subprocess (the settings
are read once, when CUDA starts): lazy vs eager kernel loading (`CUDA_MODULE_LOADING`), the
allocator's `expandable_segments`, and `torch.distributed` on one GPU (NCCL, a file rendezvous:
no port is opened). `step_snapshot` records the allocator's history over one training step for
https://pytorch.org/memory_viz. On a machine without CUDA every function raises UnsupportedError
with a one-line reason (`gpu_skip_reason` returns it without raising).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.core.errors import PerflabError, UnsupportedError
from perflab.core.jsonable import JSON


def gpu_skip_reason(device=None) -> str | None:
    """None on a CUDA device; otherwise one line saying why a GPU-only experiment is skipped."""
    import torch

    if device is not None and torch.device(device).type != "cuda":
        return f"skipped: this measures a CUDA GPU, and the device here is {torch.device(device).type}"
    if not torch.cuda.is_available():
        return "skipped: needs a CUDA GPU (torch sees none here)"
    return None


def _require_gpu(device=None) -> None:
    reason = gpu_skip_reason(device)
    if reason:
        raise UnsupportedError(reason)


class ChildError(PerflabError):
    """A measuring subprocess failed or timed out; the message carries its output."""


def _run_child(code: str, env: dict[str, str | None] | None = None, timeout: float = 180) -> JSON:
    """Run `code` in a fresh Python; its last stdout line is JSON (the child's edge), returned as read."""
    full_env = {**os.environ, **(env or {})}
    for k, v in (env or {}).items():
        if v is None:
            full_env.pop(k, None)
    try:
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                           env={k: v for k, v in full_env.items() if v is not None}, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raw = e.stdout or ""  # bytes even with text=True (subprocess.TimeoutExpired keeps them raw)
        out = (raw.decode(errors="replace") if isinstance(raw, bytes) else raw)[-2000:]
        raise ChildError(f"the measuring subprocess did not finish in {timeout:.0f} s; its output: {out!r}") from None
    lines = [ln for ln in r.stdout.strip().splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        raise ChildError(f"the measuring subprocess failed (exit {r.returncode}): {r.stderr.strip()[-1500:]}")
    return json.loads(lines[-1])


_USED = """
import json, os, torch
def nvml_used():
    try:
        import pynvml
        pynvml.nvmlInit()
        idx = torch.cuda.current_device() if torch.cuda.is_initialized() else 0
        uuid = getattr(torch.cuda.get_device_properties(idx), "uuid", None) if torch.cuda.is_initialized() else None
        if uuid is not None:
            h = pynvml.nvmlDeviceGetHandleByUUID("GPU-" + str(uuid))
        else:
            vis = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            first = vis.split(",")[0].strip() if vis else "0"
            h = pynvml.nvmlDeviceGetHandleByIndex(int(first) if first.isdigit() else 0)
        return int(pynvml.nvmlDeviceGetMemoryInfo(h).used)
    except Exception:
        return None
def driver_used():
    free, total = torch.cuda.mem_get_info()
    return int(total - free)
"""


def kernel_preload(modes: tuple[str, ...] = ("LAZY", "EAGER"), timeout: float = 240) -> list[dict[str, Any]]:
    """Device memory that CUDA takes before any tensor of yours, under each `CUDA_MODULE_LOADING`.

    Each mode runs in a fresh process: NVML's 'used' before CUDA starts (other processes), after a
    4-byte tensor (context + the kernels loaded so far), and after a matmul and a small training
    step (lazy mode loads their kernels now). `torch_reserved_bytes` is what torch's allocator holds:
    everything else in the rise is the context, kernels and libraries, invisible to
    `torch.cuda.memory_allocated`."""
    _require_gpu()
    code = _USED + """
before = nvml_used()
x = torch.ones(1, device="cuda"); torch.cuda.synchronize()
after_tensor = driver_used(); nv_tensor = nvml_used()
a = torch.randn(1024, 1024, device="cuda"); (a @ a).sum().item()
m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).cuda()
opt = torch.optim.AdamW(m.parameters())
m(torch.randn(64, 256, device="cuda")).square().mean().backward(); opt.step(); torch.cuda.synchronize()
after_work = driver_used()
print(json.dumps({"mode": os.environ.get("CUDA_MODULE_LOADING"), "torch": torch.__version__,
                  "nvml_used_before_bytes": before, "used_after_tensor_bytes": after_tensor,
                  "nvml_used_after_tensor_bytes": nv_tensor, "used_after_work_bytes": after_work,
                  "torch_reserved_bytes": torch.cuda.memory_reserved(),
                  "torch_allocated_bytes": torch.cuda.memory_allocated()}))
"""
    out = []
    for mode in modes:
        row = _run_child(code, {"CUDA_MODULE_LOADING": mode}, timeout)
        base = row["nvml_used_before_bytes"] or 0
        row["context_and_kernels_bytes"] = row["used_after_tensor_bytes"] - base - row["torch_reserved_bytes"] \
            if row["nvml_used_before_bytes"] is not None else None
        row["rise_after_tensor_bytes"] = row["used_after_tensor_bytes"] - base
        row["rise_after_work_bytes"] = row["used_after_work_bytes"] - base
        out.append(row)
    return out


def distributed_init_memory(device_id: bool = False, timeout: float = 180) -> list[dict[str, Any]]:
    """Device memory of a one-rank NCCL process group, step by step: after CUDA starts, after
    `init_process_group`, after the first and second `barrier`, after an all-reduce and after
    `destroy_process_group`. NCCL allocates its buffers on first use (the first barrier) unless
    `device_id` binds the group to the GPU at init. Rendezvous through a temporary file: no port
    is opened."""
    _require_gpu()
    code = _USED + f"""
import datetime, tempfile, os
import torch.distributed as dist
store = os.path.join(tempfile.mkdtemp(), "rendezvous")
torch.cuda.set_device(0)
x = torch.ones(1, device="cuda"); torch.cuda.synchronize()
rows = [("after CUDA init", driver_used(), nvml_used())]
kw = {{"device_id": torch.device("cuda", 0)}} if {bool(device_id)} else {{}}
dist.init_process_group("nccl", init_method=f"file://{{store}}", rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=60), **kw)
rows.append(("after init_process_group", driver_used(), nvml_used()))
dist.barrier(); torch.cuda.synchronize()
rows.append(("after first barrier", driver_used(), nvml_used()))
dist.barrier(); torch.cuda.synchronize()
rows.append(("after second barrier", driver_used(), nvml_used()))
dist.all_reduce(x); torch.cuda.synchronize()
rows.append(("after all_reduce", driver_used(), nvml_used()))
dist.destroy_process_group(); torch.cuda.synchronize()
rows.append(("after destroy_process_group", driver_used(), nvml_used()))
print(json.dumps({{"rows": [{{"stage": a, "used_bytes": b, "nvml_used_bytes": c}} for a, b, c in rows],
                  "torch_reserved_bytes": torch.cuda.memory_reserved(), "device_id": {bool(device_id)}}}))
"""
    res = _run_child(code, {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}, timeout)
    base = res["rows"][0]["used_bytes"]
    for r in res["rows"]:
        r["rise_bytes"] = r["used_bytes"] - base
        r["device_id"] = res["device_id"]
    return res["rows"]


def _b(x) -> str:
    from perflab.core.readout import binary_bytes

    return binary_bytes(x)


def preload_table(rows: list[dict[str, Any]]):
    """`kernel_preload`'s rows as a person reads them: each mode's rise in the device's used memory after a
    4-byte tensor and after some work, what torch's allocator holds, and the rest: context and kernels."""
    import pandas as pd

    return pd.DataFrame([{"CUDA_MODULE_LOADING": r["mode"], "torch": r["torch"],
                          "used after a 4-byte tensor": _b(r["rise_after_tensor_bytes"]),
                          "used after a matmul and a step": _b(r["rise_after_work_bytes"]),
                          "torch's allocator": _b(r["torch_reserved_bytes"]),
                          "context and kernels": _b(r.get("context_and_kernels_bytes"))} for r in rows])


def distributed_table(rows: list[dict[str, Any]]):
    """`distributed_init_memory`'s rows (one run or several): the device's used memory at each stage and its
    rise since CUDA started, by whether the group was bound to the device at init."""
    import pandas as pd

    return pd.DataFrame([{"device_id at init": "yes" if r.get("device_id") else "no", "stage": r["stage"],
                          "used": _b(r["used_bytes"]), "rise since CUDA init": _b(r["rise_bytes"]),
                          "NVML used": _b(r.get("nvml_used_bytes"))} for r in rows])


@dataclass(frozen=True)
class Fragmentation:
    """The caching allocator after a fragmenting workload, with or without expandable segments (bytes)."""

    expandable_segments: bool
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    allocated_bytes: int
    reserved_bytes: int
    segments: int  # the allocator's segments at the end
    inactive_split_bytes: int
    cuda_malloc_retries: int
    reserved_over_allocated: float  # peak reserved ÷ peak allocated: how much the cache holds beyond the tensors
    cached_not_allocated_bytes: int  # reserved − allocated at the end


def fragmentation_table(runs: list[Fragmentation]):
    """`fragmentation` runs side by side: peak allocated and reserved, their ratio, the segments and what the
    cache holds beyond the tensors at the end."""
    import pandas as pd

    from perflab.core.readout import num

    return pd.DataFrame([{"expandable segments": "yes" if f.expandable_segments else "no",
                          "peak allocated": _b(f.peak_allocated_bytes), "peak reserved": _b(f.peak_reserved_bytes),
                          "reserved ÷ allocated": f"{num(f.reserved_over_allocated)}×", "segments": f.segments,
                          "cached, not allocated": _b(f.cached_not_allocated_bytes)} for f in runs])


def fragmentation(expandable: bool, steps: int = 48, timeout: float = 180) -> Fragmentation:
    """A workload that fragments the caching allocator: a transient buffer that grows by 2 MiB every
    step (like batches of growing sequence length) next to small tensors that stay alive.

    Without expandable segments each larger request misses every cached block (all too small) and
    the allocator reserves a new segment; the cache then holds far more than is allocated. With
    `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` one segment grows and is reused. Returns
    the peak allocated and reserved bytes, their ratio and the allocator's segment counts."""
    _require_gpu()
    code = f"""
import json, torch
torch.ones(1, device="cuda")
keep = []
for i in range({int(steps)}):
    big = torch.empty((64 + 2 * i) * 2**20, dtype=torch.uint8, device="cuda")
    big.fill_(1)
    keep.append(torch.empty(256 * 1024, dtype=torch.uint8, device="cuda"))
    del big
torch.cuda.synchronize()
st = torch.cuda.memory_stats()
print(json.dumps({{"peak_allocated_bytes": torch.cuda.max_memory_allocated(), "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
                  "allocated_bytes": torch.cuda.memory_allocated(), "reserved_bytes": torch.cuda.memory_reserved(),
                  "segments": st.get("segment.all.current", 0), "inactive_split_bytes": st.get("inactive_split_bytes.all.current", 0),
                  "cuda_malloc_retries": st.get("num_alloc_retries", 0)}}))
"""
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True" if expandable else None}
    row = _run_child(code, env, timeout)
    return Fragmentation(bool(expandable), int(row["peak_allocated_bytes"]), int(row["peak_reserved_bytes"]),
                         int(row["allocated_bytes"]), int(row["reserved_bytes"]), int(row["segments"]),
                         int(row["inactive_split_bytes"]), int(row["cuda_malloc_retries"]),
                         row["peak_reserved_bytes"] / max(1, row["peak_allocated_bytes"]),
                         int(row["reserved_bytes"] - row["allocated_bytes"]))


@dataclass(frozen=True)
class Snapshot:
    """The CUDA allocator's history over two training steps, saved for https://pytorch.org/memory_viz."""

    path: str  # the saved snapshot (a pickle)
    segments: int
    segment_bytes: int  # bytes the segments reserve
    trace_events: int
    peak_traced_bytes: int  # the most bytes alive at once in the replayed trace
    largest_at_peak: list[dict[str, Any]]  # {'bytes', 'where'}: the largest allocations alive then, and the line that made each

    def largest(self):
        """The largest allocations alive at the peak as a table: their size and the line that made each."""
        import pandas as pd

        return pd.DataFrame([{"size": _b(e["bytes"]), "bytes": f"{e['bytes']:,}", "where": e["where"]}
                             for e in self.largest_at_peak])

    def text(self) -> str:
        return (f"saved {self.path}: {self.segments} segments, {_b(self.segment_bytes)} reserved, peak traced "
                f"{_b(self.peak_traced_bytes)}")


def step_snapshot(cfg, *, batch: int, seq: int | None = None, optimizer: str = "adamw", path: str | Path | None = None,
                  max_entries: int = 200_000) -> Snapshot:
    """Record the CUDA allocator's history over two training steps of perflab's model (the course's
    step, `perflab.workload.train.StepRunner`) and save the snapshot (`torch.cuda.memory._dump_snapshot`)
    for https://pytorch.org/memory_viz.

    Returns the file, the segments and their bytes, and the largest allocations alive at the peak
    with the source line that made them."""
    _require_gpu()
    import torch

    from perflab.core.results import results_root
    from perflab.workload.models import build_model
    from perflab.workload.optim import make_optimizer
    from perflab.workload.train import StepRunner, make_batches

    dev = torch.device("cuda", torch.cuda.current_device())
    s = seq or cfg.seq_len
    path = Path(path) if path else results_root() / f"memory_snapshot_{cfg.name}_b{batch}.pickle"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.cuda.memory._record_memory_history(max_entries=max_entries)
    try:
        model = build_model(cfg, device=dev)
        runner = StepRunner(model, make_optimizer(model.parameters(), optimizer))
        data = make_batches(cfg, batch, s, device=dev)[0]
        for _ in range(2):
            runner.step([data])
        torch.cuda.synchronize(dev)
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._dump_snapshot(str(path))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    segs = snap.get("segments", [])
    traces: list[Any] = [t for dt in snap.get("device_traces", []) for t in dt]  # entries read by key
    # replay the trace to find the peak and what was alive then
    alive: dict[int, dict] = {}
    total = peak = 0
    at_peak: list[dict] = []
    for ev in traces:
        if ev.get("action") == "alloc":
            alive[ev["addr"]] = ev
            total += ev["size"]
            if total > peak:
                peak, at_peak = total, list(alive.values())
        elif ev.get("action") == "free_completed" and ev["addr"] in alive:
            total -= alive.pop(ev["addr"])["size"]

    def where(ev) -> str:
        for fr in ev.get("frames", []):
            fn = fr.get("filename", "")
            if "perflab" in fn or ("torch" in fn and "/nn/" in fn):
                return f"{Path(fn).name}:{fr.get('line')} {fr.get('name')}"
        fr = (ev.get("frames") or [{}])[0]
        return f"{Path(fr.get('filename', '?')).name}:{fr.get('line')} {fr.get('name')}"

    top = sorted(at_peak, key=lambda e: -e["size"])[:12]
    return Snapshot(str(path), len(segs), sum(sg["total_size"] for sg in segs), len(traces), peak,
                    [{"bytes": e["size"], "where": where(e)} for e in top])
