"""Lesson 13's kernel runs that test_flash.py reads, made once per module in one Triton interpreter: in this
process, or in one child when this process imported Triton natively (torch.compile does so; each child costs
seconds to start, so one child for all of them rather than one per run)."""

from __future__ import annotations

from typing import Any

# (seq, head_dim, causal, dtype, block_m, block_n): odd lengths, each its own seed
ODD_SHAPES = [(77, 64, False, "fp16", 32, 16), (77, 64, True, "fp16", 64, 32), (45, 128, True, "bf16", 32, 16),
              (33, 128, False, "bf16", 16, 64)]


def interpreter_runs() -> dict[str, Any]:
    """Every run of the kernel the tests read: the odd-length checks, one shape's `check` (which `checks`
    must repeat), the byte counts of 200 keys (plain and causal), the recompute backward."""
    from perflab.attention import flash

    return {
        "odd": [flash.check(1, 2, s, d, dt, causal=c, block_m=bm, block_n=bn, seed=s) for s, d, c, dt, bm, bn in ODD_SHAPES],
        "check21": flash.check(1, 2, 21, 64, "fp16", block_m=32, block_n=16, seed=21),
        "bytes": {k: flash.count_bytes(1, 2, 200, 64, block_m=64, block_n=32, causal=k == "causal") for k in ("plain", "causal")},
        "backward": flash.check_backward(1, 2, 50, 64, "fp32", causal=True),
    }


def runs() -> dict[str, Any]:
    """`interpreter_runs`, here when this process can interpret Triton, else in one child process."""
    from perflab.attention import flash
    from perflab.gemm import triton_matmul as tm

    if tm.import_triton(True) is not False:
        return interpreter_runs()
    raw = tm.run_in_interpreter_process(__name__, "interpreter_runs", {})
    return {"odd": [flash.FlashCheck(**c) for c in raw["odd"]],
            "check21": flash.FlashCheck(**raw["check21"]),
            "bytes": {k: flash.ByteCount(**c) for k, c in raw["bytes"].items()},
            "backward": flash.BackwardCheck(**raw["backward"])}
