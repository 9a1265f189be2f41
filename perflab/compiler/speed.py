"""Eager vs compiled training step (forward, backward, AdamW step), and what compiling costs.

The first call of a compiled model traces it (dynamo), builds forward and backward graphs
(AOTAutograd) and generates and compiles kernels (inductor): seconds to minutes. The inductor
keeps compiled kernels on disk, so a second process ("warm" cache) compiles much faster. The
cache folder is `TORCHINDUCTOR_CACHE_DIR` (torch's default: /tmp/torchinductor_$USER);
`clear_cache()` removes it. Break-even: compile_s / (eager_step_s − compiled_step_s) steps.

On a CPU with a tiny model the compiled step can be slower: the work per step is a few small
matmuls already served by one library call each, so fusing the elementwise ops saves little
while the compiled wrapper adds guard checks and Python overhead per call.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from perflab.core.quietness import UNKNOWN, Quietness
from perflab.core.validate import positive_int
from perflab.workload.train import StepRunner

MODES = ("default", "reduce-overhead", "max-autotune")
GPU_ONLY = {
    "reduce-overhead": "captures the step as CUDA graphs (replays all kernel launches at once): needs a CUDA GPU",
    "max-autotune": "benchmarks Triton matmul/conv templates and tile configs (and CUDA graphs) per shape: "
                    "its search is for GPUs",
}


def cache_dir() -> Path:
    """Where the inductor keeps compiled kernels now."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir as _cd

    return Path(_cd())


def clear_cache() -> Path:
    """Delete the inductor's on-disk cache (the next compile is cold again)."""
    d = cache_dir()
    shutil.rmtree(d, ignore_errors=True)
    return d


def mode_skip_reason(mode: str, device: torch.device) -> str | None:
    """Why `mode` is not run on `device` (None: it runs)."""
    if mode in GPU_ONLY and device.type != "cuda":
        return f"skipped on {device.type}: {GPU_ONLY[mode]}"
    return None


def modes_table(device: torch.device):
    """Each compile mode and whether it runs on `device` (or why not), as a table."""
    import pandas as pd

    return pd.DataFrame([{"mode": m, "here": mode_skip_reason(m, device) or "runs"} for m in MODES])


def short_time(s: float) -> str:
    """Two significant digits, no padded zeros: 0.26 ms, 240 ms, 1.9 s, 110 s (a shared CPU's step
    times support no more)."""
    return f"{float(f'{s * 1e3:.2g}'):g} ms" if s < 1 else f"{float(f'{s:.2g}'):g} s"


@dataclass
class Speed:
    eager_step_s: float
    compiled_step_s: float
    compile_s: float
    mode: str
    quietness: Quietness = UNKNOWN  # what else used the device while the steps were timed (both runs)

    @property
    def speedup(self) -> float:
        return self.eager_step_s / self.compiled_step_s

    @property
    def break_even_steps(self) -> float:
        """Steps after which compiling has paid for itself (inf if the compiled step is not faster)."""
        gain = self.eager_step_s - self.compiled_step_s
        return math.ceil(self.compile_s / gain) if gain > 0 else math.inf

    def headline(self) -> float | None:
        """The speed-up, or None when the machine was busy while the steps were timed (no verdict then)."""
        return None if self.quietness.disturbed else self.speedup

    def shown_speedup(self) -> str:
        """The speed-up as a figure to set beside others, saying when the machine was busy."""
        return f"{self.speedup:.2f}×" + (" (measured while the machine was busy: no verdict)" if self.quietness.disturbed else "")

    def table(self):
        """One row: the two step times, the speed-up, the compile time, the break-even and the machine's
        quietness while the steps were timed."""
        import pandas as pd

        from perflab.core.readout import num

        be = self.break_even_steps
        return pd.DataFrame([{"eager step": short_time(self.eager_step_s), "compiled step": short_time(self.compiled_step_s),
                              "speedup": f"{num(self.speedup, 2)}×", "compile": short_time(self.compile_s),
                              "break-even": f"{num(be)} steps" if be != float("inf") else "never (no gain per step)",
                              "machine": self.quietness.line()}])

    def as_dict(self) -> dict:
        return {"eager_step_s": self.eager_step_s, "compiled_step_s": self.compiled_step_s, "speedup": self.speedup,
                "compile_s": self.compile_s, "break_even_steps": self.break_even_steps, "mode": self.mode}


def time_steps(model, batches, steps: int, *, compile_kw: dict | None = None, warmup: int = 1) -> tuple[float, float]:
    """(first-call seconds, median seconds per later step) of AdamW training steps of `model` (the
    course's step, `perflab.workload.train.StepRunner`; each step's wall time after waiting for the device)."""
    first, median, _ = watched_steps(model, batches, steps, compile_kw=compile_kw, warmup=warmup)
    return first, median


def watched_steps(model, batches, steps: int, *, compile_kw: dict | None = None,
                  warmup: int = 1) -> tuple[float, float, Quietness]:
    """`time_steps`, and the machine's quietness while the timed steps ran (the first call, which
    compiles, and the warm-up are not watched: the compiler's worker processes are not other programs)."""
    from perflab.core.quietness import watch

    steps = positive_int("steps", steps)
    runner = StepRunner(model, compile_kw=compile_kw)
    first = runner.step([batches[0]]).step_s
    for i in range(warmup):
        runner.step([batches[(i + 1) % len(batches)]])
    with watch(runner.device) as w:
        ts = sorted(runner.step([batches[i % len(batches)]]).step_s for i in range(steps))
    return first, ts[len(ts) // 2], w.result


def measure(model_fn, batches, steps: int = 5, *, mode: str = "default", backend: str = "inductor",
            progress: Callable[[str], None] | None = None) -> Speed:
    """Eager and compiled step time of fresh models from `model_fn()`. compile_s is the first
    compiled call minus one steady compiled step (the cache as it is now: warm or cold); `quietness`
    is the machine's while the steps of both were timed.
    `progress`, if given, is told each phase as it starts (with a cold cache the compile is the longest)."""
    say = progress or (lambda _msg: None)
    say(f"1/2 eager: a warm-up step, then {steps} timed")
    _, eager, q_eager = watched_steps(model_fn(), batches, steps)
    torch._dynamo.reset()
    kw = {"backend": backend} if backend != "inductor" else {}
    if mode != "default":
        kw["mode"] = mode
    say(f"2/2 compiled ({backend}): the first call compiles (the longest phase with a cold cache), "
        f"then a warm-up step and {steps} timed")
    first, comp, q_comp = watched_steps(model_fn(), batches, steps, compile_kw=kw)
    torch._dynamo.reset()
    return Speed(eager, comp, max(first - comp, 0.0), mode, Quietness.combine([q_eager, q_comp]))


def compile_time(model_fn, batch, *, cache: str | Path | None = None) -> dict:
    """Compile time of one training step with a cold inductor cache (a new empty folder) and
    then warm (same folder, in-memory state reset). Runs in this process: dynamo's in-memory
    caches are reset between the two."""
    own = cache is None
    folder = Path(tempfile.mkdtemp(prefix="perflab_inductor_")) if own else Path(cache)
    old = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder)
    out = {}
    try:
        for label in ("cold", "warm"):
            torch._dynamo.reset()
            first, steady = time_steps(model_fn(), [batch], 1, compile_kw={}, warmup=0)
            out[f"{label}_s"] = max(first - steady, 0.0)
    finally:
        torch._dynamo.reset()
        if old is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = old
        if own:
            shutil.rmtree(folder, ignore_errors=True)
    return out
