"""What the process and the device say is in use, beside what torch's allocator counts (lesson 03).

* `rss_bytes`, `rss_peak_bytes` (and `reset_rss_peak`): the process's resident set size and its peak
  since the last reset (Linux's VmHWM). It holds the interpreter, libraries, oneDNN/BLAS buffers and
  memory glibc has not returned to the OS, and pages count only once touched: a coarse number.
* `nvml_used_bytes`, `cuda_used_bytes`: the device's memory in use as NVML (and `nvidia-smi`) or the
  driver report it: every process, the CUDA context, the loaded kernels and the allocator's cache.
"""

from __future__ import annotations

import os


def rss_bytes() -> int | None:
    """Resident set size of this process (bytes), or None when psutil is missing."""
    try:
        import psutil

        return int(psutil.Process(os.getpid()).memory_info().rss)
    except Exception:  # pragma: no cover
        return None


def _status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def reset_rss_peak() -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM) of this process (Linux ≥ 4.0); False elsewhere."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def rss_peak_bytes() -> int | None:
    """Peak RSS since the last `reset_rss_peak()` (Linux VmHWM), or None."""
    return _status_kb("VmHWM")


def nvml_used_bytes(device) -> int | None:
    """Device memory in use as NVML (and nvidia-smi) reports it: every process, the CUDA context,
    the loaded kernels and the allocator's cache. None without NVML."""
    import torch

    try:
        import pynvml

        pynvml.nvmlInit()
        idx = torch.device(device).index or 0
        handle = None
        uuid = getattr(torch.cuda.get_device_properties(idx), "uuid", None)
        if uuid is not None:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
            except Exception:
                handle = None
        if handle is None:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            if visible and visible.split(",")[idx].strip().isdigit():
                idx = int(visible.split(",")[idx])
            handle = pynvml.nvmlDeviceGetHandleByIndex(idx)
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
    except Exception:
        return None


def cuda_used_bytes(device) -> int:
    """total − free from the driver (`torch.cuda.mem_get_info`): like NVML's 'used', device-wide."""
    import torch

    free, total = torch.cuda.mem_get_info(device)
    return int(total - free)
