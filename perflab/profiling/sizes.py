"""Lesson 09's sizes by where it runs: smoke (the tests), a CPU, a GPU. One table, read once by the lesson
(`size = ctx.sizes(SIZES)`, the rule in `perflab.core.sizes`).

The profiled step. On a CPU it is tiny-gpt at batch 4 × 64 tokens, which keeps each of the lesson's
profiled runs to seconds on 2 cores. On a GPU that step is too small to diagnose: tiny-gpt's kernels
finish faster than the host issues them, so even its healthy step is launch-bound and the planted
`launch` fault hides in it. The GPU row profiles gpt2-small at batch 8 × 512 tokens in fp32 instead,
tens of milliseconds of device work per step, and scales two faults with it:

* `launch`: the weight EMA walks 5,000 rows one at a time (1,000 on a CPU). The host issues a step's
  kernels well ahead of the device, so a short EMA loop would hide in that lead; 5,000 tiny updates
  outlast it, and the device then waits for the host between them.
* `sync`: the per-layer check still reads a value back (`.item()`) after every Linear, but its host
  statistics read the first 65,536 values of each output, not all of them: the cost stays the sync's
  (the device drains, then waits for the host), not minutes of numpy on gigabytes of activations.

The `comm` fault's two ranks run gloo with CPU tensors (one GPU cannot host two NCCL ranks), so they
keep the CPU's step at every size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from perflab.profiling.faults import FaultSizes


@dataclass(frozen=True)
class Sizes:
    preset: str  # sections 2-3: the profiled step's model
    batch: int
    seq: int
    steps: int  # profiled (active) steps per run
    timelines: int  # section 3: faults drawn as timelines
    comm: bool  # section 3: profile the two-rank `comm` fault (it starts two processes)
    fix_all: bool  # section 3: fix every planted fault (False: only those that start no worker processes)
    with_stack: bool  # section 2: record Python stacks in the healthy run
    ceiling_n: int  # section 5: m = n = k of the matmul that measures the ceiling when lesson 04 stored none
    ceiling_rep_ms: float
    kernel_compile: bool  # section 6: build the C++ kernel even when the lesson's build_kernel is False
    kernel_rows: int  # section 6: rows × 1024 of the fused op's input
    kernel_rep_ms: float
    faults: FaultSizes = field(default_factory=FaultSizes)  # the planted faults' sizes
    comm_preset: str = "tiny-gpt"  # the `comm` fault's step (CPU ranks on gloo)
    comm_batch: int = 4
    comm_seq: int = 64

    def planted(self) -> list[str]:
        """The faults section 3 plants, in the lesson's order."""
        return ["loader", "sync", "launch"] + (["comm"] if self.comm else [])

    def fixed(self) -> list[str]:
        """The faults section 3 fixes and profiles again (smoke: those that start no worker processes)."""
        return self.planted() if self.fix_all else ["sync", "launch"]

    def step_of(self, fault: str) -> dict:
        """`profile_step`'s preset, batch, seq and sizes for `fault` (the `comm` fault's are the CPU ranks')."""
        if fault == "comm":
            return {"preset": self.comm_preset, "batch": self.comm_batch, "seq": self.comm_seq, "sizes": self.faults}
        return {"preset": self.preset, "batch": self.batch, "seq": self.seq, "sizes": self.faults}


SIZES: dict[str, Sizes] = {
    "smoke": Sizes(preset="tiny-gpt", batch=4, seq=64, steps=1, timelines=1, comm=False, fix_all=False, with_stack=False,
                   ceiling_n=256, ceiling_rep_ms=10, kernel_compile=False, kernel_rows=64, kernel_rep_ms=10),
    "cpu": Sizes(preset="tiny-gpt", batch=4, seq=64, steps=3, timelines=4, comm=True, fix_all=True, with_stack=True,
                 ceiling_n=1024, ceiling_rep_ms=50, kernel_compile=False, kernel_rows=4096, kernel_rep_ms=50),
    "gpu": Sizes(preset="gpt2-small", batch=8, seq=512, steps=5, timelines=4, comm=True, fix_all=True, with_stack=True,
                 ceiling_n=8192, ceiling_rep_ms=100, kernel_compile=True, kernel_rows=8192, kernel_rep_ms=50,
                 faults=FaultSizes(loader_ms=40.0, launch_rows=5000, sync_values=65536)),
}
