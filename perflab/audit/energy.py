"""Energy of the timed steps, where the machine can measure it.

* NVIDIA GPUs: NVML's total energy counter (`nvmlDeviceGetTotalEnergyConsumption`, millijoules since
  the driver loaded; Volta and newer), read before and after the timed steps.
* Linux CPUs: RAPL through `/sys/class/powercap/*/energy_uj` (microjoules, package domains; the counter
  wraps at `max_energy_range_uj`). Often readable by root only.
Elsewhere there is no meter: `EnergyMeter.reason` says why in one line and the reading is None.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

import torch


class EnergyMeter:
    """`start()`, run the work, `stop()` → joules (None when nothing could measure it; `reason` says why)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.reason = ""
        self.source = ""
        self._read = self._pick()
        self._start: float | None = None

    def _pick(self):
        if self.device.type == "cuda":
            try:
                import pynvml

                pynvml.nvmlInit()
                idx = self.device.index if self.device.index is not None else torch.cuda.current_device()
                handle = pynvml.nvmlDeviceGetHandleByIndex(idx)
                pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            except Exception as e:  # noqa: BLE001 - no NVML, or a GPU without the energy counter
                self.reason = f"energy not measurable: NVML's energy counter is unavailable ({type(e).__name__})"
                return None
            self.source = "NVML total energy counter"
            return lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3
        if self.device.type == "cpu":
            zones = [Path(p) for p in sorted(glob.glob("/sys/class/powercap/*/energy_uj"))
                     if ":" in Path(p).parent.name and Path(p).parent.name.count(":") == 1]
            readable = [z for z in zones if os.access(z, os.R_OK)]
            if not zones:
                self.reason = "energy not measurable: no RAPL counters (/sys/class/powercap) on this machine"
                return None
            if not readable:
                self.reason = "energy not measurable: the RAPL counters in /sys/class/powercap are readable by root only"
                return None
            self.source = f"RAPL ({len(readable)} package domain(s), /sys/class/powercap)"
            self._wrap = [_max_range(z) for z in readable]
            self._zones = readable
            return self._rapl
        self.reason = f"energy not measurable: no energy counter perflab reads on {self.device.type}"
        return None

    def _rapl(self) -> float:
        return sum(int(z.read_text()) for z in self._zones) / 1e6

    def start(self) -> None:
        if self._read is not None:
            try:
                self._start = self._read()
            except Exception as e:  # noqa: BLE001
                self.reason, self._read = f"energy not measurable: reading the counter failed ({type(e).__name__})", None

    def stop(self) -> float | None:
        if self._read is None or self._start is None:
            return None
        try:
            end = self._read()
        except Exception as e:  # noqa: BLE001
            self.reason = f"energy not measurable: reading the counter failed ({type(e).__name__})"
            return None
        joules = end - self._start
        if joules < 0 and self.source.startswith("RAPL"):  # a counter wrapped
            joules += sum(self._wrap) / 1e6
        return joules if joules >= 0 else None


def _max_range(zone: Path) -> int:
    try:
        return int((zone.parent / "max_energy_range_uj").read_text())
    except (OSError, ValueError):
        return 0
