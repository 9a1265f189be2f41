"""Lesson 10's panel: choose the compile mode, the dtype and dynamic shapes; see the step time, the
compile time and the recompiles, measured on a one-block model so that one answer takes seconds.

    >>> compile_view("default", "fp32", "default")       # a DataFrame (or one line when a mode is GPU-only)

Measured on this 2-core CPU under load: the eager backend (dynamo only: graphs, guards and
recompiles, no kernels) answers in about 4 s; the inductor compiles C++ kernels for each graph,
about 110 s with a cold cache, so the panel starts on the eager backend.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from perflab.compiler import models, speed
from perflab.compiler.speed import (
    short_time,  # the lesson's one time format (kept here for its callers)
)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
DYNAMIC = {"default": None, "dynamic=True": True, "dynamic=False": False}
LENGTHS = (16, 24, 32)
DIMS = dict(vocab=64, hidden=32, heads=2, layers=1, d_ff=64, seq_len=32)


def compile_view(mode: str, dtype: str, dynamic: str, *, device: str | torch.device = "cpu",
                 backend: str = "inductor", reps: int = 5) -> Any:
    """Forward passes of a one-block FixedLM compiled with `mode` in `dtype`, over three sequence
    lengths: the first call (compile + run), the eager and compiled steady call, and the graphs
    compiled after each length (a recompile when a length fails a shape guard)."""
    import pandas as pd

    device = torch.device(device)
    if mode not in speed.MODES:
        raise ValueError(f"mode must be one of {', '.join(speed.MODES)}, got {mode!r}")
    skip = speed.mode_skip_reason(mode, device)
    if skip:
        return f"{mode}: {skip}"
    torch._dynamo.reset()
    model = models.FixedLM(**DIMS, seed=0).to(device=device, dtype=DTYPES[dtype]).eval()
    frames = [0]

    def counting(gm, example_inputs):  # count each graph handed to the backend, then compile it
        frames[0] += 1
        if backend == "eager":
            return gm.forward
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, example_inputs, config_patches={"triton.cudagraphs": mode == "reduce-overhead"}
                          if mode != "default" else None)

    compiled = torch.compile(model, backend=counting, dynamic=DYNAMIC[dynamic])
    rows = []
    with torch.no_grad():
        for s in LENGTHS:
            x = torch.randint(0, DIMS["vocab"], (2, s), generator=torch.Generator().manual_seed(s), device=device)
            before = frames[0]
            t0 = time.perf_counter()
            compiled(x)
            first = time.perf_counter() - t0
            eager, comp = [], []
            for _ in range(reps):
                t0 = time.perf_counter()
                model(x)
                eager.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                compiled(x)
                comp.append(time.perf_counter() - t0)
            eager.sort()
            comp.sort()
            rows.append({"seq": s, "recompiled": "yes" if frames[0] > before else "no",
                         "graphs so far": frames[0], "first call (compile + run)": short_time(first),
                         "eager call": short_time(eager[reps // 2]), "compiled call": short_time(comp[reps // 2]),
                         "speedup": f"{eager[reps // 2] / comp[reps // 2]:.2g}×"})
    torch._dynamo.reset()
    return pd.DataFrame(rows)


BACKENDS = {"eager (dynamo only: seconds)": "eager", "inductor (compiles kernels: minutes cold on a small CPU)": "inductor"}


def panel_view(mode: str, dtype: str, dynamic: str, backend: str, device: str | torch.device = "cpu") -> Any:
    """`compile_view` for the lesson's panel: `backend` is one of BACKENDS' labels."""
    return compile_view(mode, dtype, dynamic, device=device, backend=BACKENDS[backend])
