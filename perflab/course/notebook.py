"""What every notebook does first: say where it measures, and size itself for smoke or full runs.

    >>> ctx = start(smoke)          # prints the device, torch version and date; returns a Context
    >>> size = ctx.sizes(perflab.flops.sizes.SIZES)   # the lesson's sizes for this run (perflab.core.sizes)

`start` also calls `set_readable_display()`: tables show floats to 4 significant digits without
padded zeros, so a lesson's DataFrames read like its printed numbers (no `744.431582` tokens/s, no
`0.8000`).
"""

from __future__ import annotations

import datetime as _dt
import platform
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from perflab.core.hardware import Peaks


@dataclass
class Context:
    device: Any  # torch.device
    info: Any  # DeviceInfo
    peaks: Peaks  # the device's peaks per dtype (`perflab.core.hardware.peaks_for`: spec sheet, estimate or unknown)
    smoke: bool

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    def sizes(self, table):
        """The row of a lesson's size table for this run: smoke, this CPU or a GPU (`perflab.core.sizes`)."""
        from perflab.core.sizes import for_run

        return for_run(table, self.smoke, self.device)

    def pick(self, full, smoke, cpu=None):
        """`smoke` in smoke mode; `cpu` (if given) on a CPU; `full` otherwise (a GPU)."""
        if self.smoke:
            return smoke
        if not self.on_gpu and cpu is not None:
            return cpu
        return full


def trimmed(x: float, significant: int = 4) -> str:
    """`x` to `significant` digits without padded zeros: 0.8 (not 0.8000), 1.2, 27, 0.0012, 1,234."""
    from perflab.core.readout import num

    text = num(x, significant)
    if "." in text and "e" not in text:
        text = text.rstrip("0").rstrip(".")
    return text


def set_readable_display(significant: int = 4) -> None:
    """Make pandas show every float to `significant` digits, without padded zeros (tables in this
    kernel, from now on)."""
    import pandas as pd

    pd.set_option("display.float_format", lambda x: trimmed(x, significant))
    pd.set_option("display.max_colwidth", None)  # never cut a cell's text with "…"


def start(smoke: bool = False, device: str | None = None, quiet: bool = False) -> Context:
    """Pick the device, print what this notebook measures on, and return the context."""
    import torch

    from perflab.core.device import describe, pick_device
    from perflab.core.hardware import peaks_for

    dev = pick_device(device)
    info = describe(dev)
    peaks = peaks_for(info)
    set_readable_display()
    if not quiet:
        mode = "smoke mode (tiny sizes, for tests)" if smoke else ("full size" if dev.type == "cuda" else "CPU sizes")
        print(f"Measured on: {info.name} [{dev}] · torch {torch.__version__} · Python {platform.python_version()} · "
              f"{_dt.date.today().isoformat()} · {mode}")
        if dev.type != "cuda":
            print("No CUDA GPU here: measurements run on the CPU; GPU-only ideas are shown through the model "
                  "and, where perflab ships it, reference data recorded on a real GPU.")
    return Context(dev, info, peaks, bool(smoke))


def readable(frame, missing: str | dict[str, str] = "not measured", significant: int = 4):
    """`frame` with every number as text to `significant` digits (no padded zeros) and every missing
    value replaced by what is missing and why: one phrase for all columns, or one per column."""
    import math

    def cell(col: str, v: Any) -> Any:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return missing.get(col, "–") if isinstance(missing, dict) else missing
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return v
        return trimmed(v, significant)

    out = frame.copy().astype(object)
    for col in out.columns:
        out[col] = [cell(col, v) for v in frame[col]]
    return out
