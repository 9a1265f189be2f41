"""Pinned (page-locked) host memory × non_blocking copies: the 2×2 of the DataLoader lesson.

On a CUDA GPU a copy from pageable host memory is staged by the driver through a pinned buffer and
blocks the host; from pinned memory the DMA engine reads the tensor directly, and with
`non_blocking=True` the copy is queued on the stream and the host goes on, so the copy of the next
batch can overlap this step's compute. Only pinned + non_blocking gives that overlap: a
non_blocking copy from pageable memory still synchronises.

Pinning has a cost: page-locking takes time (about the time of a copy) and takes the pages away
from the OS, which cannot swap them out (`pin_cost` measures both). Too much pinned memory on a
host with little RAM makes the OS swap.

On a CPU there is no device copy to speed up: `pin_memory=True` without an accelerator warns and
does nothing, and `.to("cpu", non_blocking=True)` is a no-op. `cpu_explanation` says so; the
lesson shows the seed's A100 figures (`published_2x2`) as published data instead.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from perflab.core.errors import UnsupportedError

DATA = Path(__file__).with_name("data")


def published_2x2():
    """The seed's A100 80GB PCIe 2×2 table (seconds as published) as a DataFrame, with its source."""
    import pandas as pd

    d = json.loads((DATA / "published.json").read_text())["pin_memory_non_blocking"]
    df = pd.DataFrame(d["rows"])
    df.attrs["source"] = f"{d['gpu']} · {d['source']}"
    return df


def published_workers():
    import pandas as pd

    d = json.loads((DATA / "published.json").read_text())["num_workers"]
    df = pd.DataFrame(d["rows"])
    df.attrs["source"] = d["source"]
    return df


def lcg_story() -> dict:
    return json.loads((DATA / "published.json").read_text())["lcg_shuffle"]


def cpu_explanation() -> str:
    return ("No CUDA device here: pin_memory=True has nothing to speed up (torch warns and skips pinning), and a "
            "non_blocking copy to the CPU is a no-op. The 2×2 below is the published A100 measurement.")


def locked_kib() -> int | None:
    """The process's locked memory (VmLck, KiB) on Linux, or None."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmLck:"):
                return int(line.split()[1])
    except OSError:  # pragma: no cover
        pass
    return None


def pin_cost(nbytes: int) -> dict:
    """Time to pin a tensor of `nbytes` and the page-locked memory it takes (CUDA only)."""
    if not torch.cuda.is_available():
        raise UnsupportedError("pinning needs a CUDA device; on a CPU it does nothing")
    x = torch.empty(nbytes, dtype=torch.uint8)
    t0 = time.perf_counter()
    y = x.pin_memory()
    pin_s = time.perf_counter() - t0
    return {"bytes": nbytes, "pin_s": pin_s, "pin_gb_per_s": nbytes / pin_s / 1e9, "is_pinned": y.is_pinned()}


def measure_2x2(nbytes: int = 256 << 20, compute_n: int = 4096, reps: int = 10) -> list[dict]:
    """Host→device GB/s and a copy-then-compute step's time for each (pin_memory, non_blocking) (CUDA only).

    The step copies the next batch and runs a matmul on the previous one; only pinned +
    non_blocking lets the copy run while the matmul does.
    """
    if not torch.cuda.is_available():
        raise UnsupportedError("the pin_memory × non_blocking table needs a CUDA device")
    dev = torch.device("cuda")
    a = torch.randn(compute_n, compute_n, device=dev, dtype=torch.bfloat16)
    rows = []
    for pin in (True, False):
        host = torch.empty(nbytes, dtype=torch.uint8)
        if pin:
            host = host.pin_memory()
        for nb in (True, False):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(reps):
                host.to(dev, non_blocking=nb)
            torch.cuda.synchronize()
            copy_s = (time.perf_counter() - t0) / reps
            t0 = time.perf_counter()
            for _ in range(reps):
                d = host.to(dev, non_blocking=nb)
                a @ a
                del d
            torch.cuda.synchronize()
            step_s = (time.perf_counter() - t0) / reps
            rows.append({"pin_memory": pin, "non_blocking": nb, "h2d_gb_per_s": nbytes / copy_s / 1e9,
                         "step_s": step_s})
    return rows
