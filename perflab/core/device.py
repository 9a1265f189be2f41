"""Pick the device to measure on, wait for it, and describe it.

    >>> dev = pick_device()            # cuda if present, else mps, else cpu
    >>> info = describe(dev)           # DeviceInfo: name, SMs, memory, versions, ...
    >>> print(info)                    # a readable table
    >>> info.as_dict()                 # the same as a dict (what `perflab env --json` prints)

`PERFLAB_DEVICE=cpu` (or cuda:1, mps) overrides the choice everywhere, so a GPU user can run the
CPU version of a lesson.
"""

from __future__ import annotations

import os
import platform
import re
import socket
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON
from perflab.core.readout import binary_bytes

if TYPE_CHECKING:
    import torch
else:
    try:  # torch is needed to measure, not to import this module
        import torch
    except ImportError:  # pragma: no cover
        torch = None


def pick_device(prefer: str | None = None) -> torch.device:
    """The device to measure on: `prefer`, else $PERFLAB_DEVICE, else cuda > mps > cpu."""
    want = prefer or os.environ.get("PERFLAB_DEVICE")
    if want:
        try:
            dev = torch.device(want)
        except RuntimeError as e:
            raise InputError(f"unknown device {want!r}: use cpu, cuda, cuda:N or mps") from e
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise InputError(f"device {want!r} asked for, but torch sees no CUDA GPU: use cpu")
        if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InputError(f"device {want!r} asked for, but there are {torch.cuda.device_count()} GPUs")
        if dev.type == "mps" and not _mps_available():
            raise InputError(f"device {want!r} asked for, but MPS is not available: use cpu")
        if dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        return dev
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps and mps.is_available())


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait until all work queued on `device` has finished (a no-op on CPU)."""
    dev = torch.device(device) if device is not None else pick_device()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        torch.mps.synchronize()


def free_memory_bytes(device: torch.device | str) -> int | None:
    """Bytes the device can still allocate (GPU: free device memory; CPU: available RAM)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return int(free)
    if dev.type == "mps":
        return None
    return _meminfo().get("MemAvailable")


@dataclass
class DeviceInfo:
    """What a device is. `details` holds kind-specific fields; every size is in bytes."""

    kind: str  # cuda, mps or cpu
    name: str
    index: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.kind, self.index) if self.index is not None else torch.device(self.kind)

    @property
    def slug(self) -> str:
        """A file-name-safe key for this device, e.g. 'cuda-nvidia-h100-80gb-hbm3'."""
        return self.kind + "-" + re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")

    def as_dict(self) -> JSON:
        return {"kind": self.kind, "name": self.name, "index": self.index, "host": socket.gethostname(), **self.details}

    def table(self) -> list[tuple[str, str]]:
        """(label, value) rows with units, for printing."""
        rows = [("device", f"{self.kind}" + (f":{self.index}" if self.index is not None else "")), ("name", self.name)]
        for key, value in self.details.items():
            if value is None or value == "" or value == []:
                continue
            label = key.replace("_", " ")
            if key.endswith("_bytes") and isinstance(value, (int, float)):
                label = label.removesuffix(" bytes")
                value = binary_bytes(value)
            elif isinstance(value, list):
                value = "; ".join(map(str, value))
            rows.append((label, str(value)))
        return rows

    def __str__(self) -> str:
        rows = self.table()
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def describe(device: torch.device | str | None = None) -> DeviceInfo:
    """Describe `device` (default: `pick_device()`)."""
    dev = torch.device(device) if device is not None else pick_device()
    if dev.type == "cuda":
        return _describe_cuda(dev)
    if dev.type == "mps":
        return DeviceInfo("mps", f"Apple GPU ({platform.processor() or platform.machine()})", None,
                          {"torch_version": torch.__version__, "macos": platform.mac_ver()[0]})
    return _describe_cpu()


def _describe_cuda(dev: torch.device) -> DeviceInfo:
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    p = torch.cuda.get_device_properties(index)
    details: dict[str, Any] = {
        "sm_count": p.multi_processor_count,
        "memory_bytes": int(p.total_memory),
        "compute_capability": f"{p.major}.{p.minor}",
        "l2_cache_bytes": int(getattr(p, "L2_cache_size", 0)) or None,
        "driver_version": _nvidia_driver_version(),
        "cuda_version": torch.version.cuda,
        "hip_version": getattr(torch.version, "hip", None),
        "cudnn_version": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "torch_version": torch.__version__,
        "device_count": torch.cuda.device_count(),
    }
    return DeviceInfo("cuda", p.name, index, details)


@lru_cache(maxsize=1)
def _nvidia_driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    p = Path("/proc/driver/nvidia/version")
    if p.exists():
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", p.read_text())
        if m:
            return m.group(1)
    return None


# ---------------------------------------------------------------- CPU

@dataclass(frozen=True)
class CPUFacts:
    """Facts about the host CPU read from the OS; `None` where the OS does not say."""

    model: str
    vendor: str
    arch: str
    family: int | None
    cpu_model: int | None
    logical_cpus: int
    physical_cores: int
    usable_cpus: int  # CPUs this process may run on (affinity)
    usable_cores: int  # physical cores among them
    flags: frozenset[str]
    clock_mhz: float | None
    clock_source: str
    numa_nodes: dict[int, str]  # node -> cpulist
    l2_bytes_per_core: int | None
    l3_bytes: int | None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    text = _read("/proc/meminfo") or ""
    for line in text.splitlines():
        m = re.match(r"(\w+):\s+(\d+)\s*kB", line)
        if m:
            out[m.group(1)] = int(m.group(2)) * 1024
    if not out:
        try:
            import psutil

            vm = psutil.virtual_memory()
            out = {"MemTotal": int(vm.total), "MemAvailable": int(vm.available)}
        except Exception:
            pass
    return out


def _parse_size(text: str | None) -> int | None:
    if not text:
        return None
    m = re.match(r"(\d+)\s*([KMG]?)", text)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)]


def parse_cpuinfo(text: str) -> list[dict[str, str]]:
    """/proc/cpuinfo as one dict per logical CPU."""
    cpus, cur = [], {}
    for line in text.splitlines():
        if not line.strip():
            if cur:
                cpus.append(cur)
                cur = {}
            continue
        if ":" in line:
            k, v = line.split(":", 1)
            cur[k.strip()] = v.strip()
    if cur:
        cpus.append(cur)
    return cpus


@lru_cache(maxsize=1)
def cpu_facts() -> CPUFacts:
    """Read the host CPU's model, cores, vector flags, clock and NUMA layout."""
    cpus = parse_cpuinfo(_read("/proc/cpuinfo") or "")
    first = cpus[0] if cpus else {}
    model = first.get("model name") or first.get("Model") or platform.processor() or platform.machine()
    if platform.system() == "Darwin":  # pragma: no cover - not on CI
        import subprocess

        try:
            model = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True).stdout.strip() or model
        except OSError:
            pass
    flags = frozenset((first.get("flags") or first.get("Features") or "").split())
    logical = os.cpu_count() or 1
    try:
        usable = sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        usable = list(range(logical))
    core_of = {}
    for c in cpus:
        if "processor" in c:
            core_of[int(c["processor"])] = (c.get("physical id", "0"), c.get("core id", c["processor"]))
    physical = len(set(core_of.values())) or logical
    usable_cores = len({core_of.get(i, (None, i)) for i in usable}) or len(usable)

    clock, source = None, "unknown"
    mx = _read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if mx and mx.isdigit():
        clock, source = int(mx) / 1000, "cpufreq max (boost) clock"
    elif (m := re.search(r"@\s*([\d.]+)\s*GHz", model)):
        clock, source = float(m.group(1)) * 1000, "nominal clock in the model name"
    elif first.get("cpu MHz"):
        clock, source = float(first["cpu MHz"]), "/proc/cpuinfo 'cpu MHz' (current clock; may be below boost)"

    numa: dict[int, str] = {}
    node_root = Path("/sys/devices/system/node")
    if node_root.is_dir():
        for d in sorted(node_root.glob("node[0-9]*")):
            numa[int(d.name[4:])] = _read(str(d / "cpulist")) or ""

    l2 = l3 = None
    cache_root = Path("/sys/devices/system/cpu/cpu0/cache")
    if cache_root.is_dir():
        for idx in cache_root.glob("index*"):
            level, ctype = _read(str(idx / "level")), _read(str(idx / "type"))
            size = _parse_size(_read(str(idx / "size")))
            if level == "2" and ctype in {"Unified", "Data"}:
                l2 = size
            elif level == "3":
                l3 = size

    def _int(key: str) -> int | None:
        v = first.get(key)
        try:
            return int(v, 0) if v else None
        except ValueError:
            return None

    return CPUFacts(
        model=model, vendor=first.get("vendor_id", platform.system()), arch=platform.machine(),
        family=_int("cpu family"), cpu_model=_int("model"), logical_cpus=logical,
        physical_cores=physical, usable_cpus=len(usable), usable_cores=usable_cores, flags=flags,
        clock_mhz=clock, clock_source=source, numa_nodes=numa, l2_bytes_per_core=l2, l3_bytes=l3,
    )


def _describe_cpu() -> DeviceInfo:
    f = cpu_facts()
    mem = _meminfo()
    isa = None
    try:
        isa = torch.backends.cpu.get_cpu_capability()
    except Exception:
        pass
    details: dict[str, Any] = {
        "vendor": f.vendor,
        "arch": f.arch,
        "logical_cpus": f.logical_cpus,
        "physical_cores": f.physical_cores,
        "usable_cpus": f.usable_cpus,
        "torch_threads": torch.get_num_threads(),
        "clock_mhz": round(f.clock_mhz) if f.clock_mhz else None,
        "clock_source": f.clock_source,
        "vector_isa": isa,
        "numa_nodes": [f"node{n}: cpus {c}" for n, c in f.numa_nodes.items()],
        "memory_bytes": mem.get("MemTotal"),
        "l2_cache_per_core_bytes": f.l2_bytes_per_core,
        "l3_cache_bytes": f.l3_bytes,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
    }
    return DeviceInfo("cpu", f.model, None, details)
