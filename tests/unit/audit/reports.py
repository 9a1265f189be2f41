"""A made-up audit report, every figure chosen, for the renderers' and the JSON's tests: no step runs."""

from typing import Any

from perflab.audit.fp8 import gains
from perflab.audit.report import (
    AuditReport,
    Ceilings,
    Energy,
    GapTerm,
    GraphBreak,
    GraphBreaks,
    Memory,
    Recommendation,
    StepTime,
    TopOp,
    Uncounted,
    Waterfall,
    Work,
)
from perflab.core.hardware import by_id
from perflab.flops.mfu import Basis, utilization

STEP_S = 0.1
FLOPS = 4_000_000_000
# two GEMM shapes on an H100 (the GPU named): a wide one where fp8 pays, a small one where it loses
FP8_GEMMS = {(8192, 4096, 4096): 1, (1024, 1024, 1024): 3}
FP8_FLOPS = 2 * 8192 * 4096 * 4096 + 3 * 2 * 1024**3 + 10**10  # and 1e10 FLOPs with no 2-D shape (attention's)


def made_up(**change) -> AuditReport:
    """A 100 ms step of 4e9 FLOPs on a made-up 100 TFLOP/s spec peak (MFU 4e9 / 1e14 / 0.1 = 0.04 %)."""
    basis = Basis(tflops=100.0, kind="spec peak", dtype="bf16", what="a made-up datasheet")
    u = utilization(STEP_S, {"bf16": FLOPS}, {"bf16": basis}, {"bf16": FLOPS + 1_000_000})
    work = Work(FLOPS, {"bf16": FLOPS + 1_000_000}, FLOPS + 1_000_000, FLOPS - 500_000, 1000, 1000, 3_900_000_000,
                "", [GapTerm("attention (scores and values products, not in 6N; counted dense)", 100_000_000),
                     GapTerm("the rest", 0)], [Uncounted("mylib::fused_mlp", 2, 0.005)])
    fields: dict[str, Any] = dict(
        name="made-up step", device="cpu: a test machine", time=StepTime(STEP_S, 0.02, 650_000, 8),
        work=work, utilization=u,
        waterfall=Waterfall({"data_wait": 0.04, "host_sync": 0.0, "launch_overhead": 0.01, "optimizer": 0.02,
                             "compute": 0.03}),
        top_ops=[TopOp("aten::mm", 4, 0.02, 2_000_000_000, 1_000_000, 1e11, 5e7, "compute"),
                 TopOp("aten::copy_", 9, 0.001, None, None, None, None)],
        memory=Memory(4000, 4000, 8000, 2000, 20000, None, ["peak: how it was read"]),
        breaks=GraphBreaks([GraphBreak("/x/model.py", 12, "model.py:12 in forward", "a .item() call", 2)]),
        energy=Energy(None, "energy not measurable: no meter here"),
        recommendations=[Recommendation("loader", "the step waits for data; acts on data wait", 0.04),
                         Recommendation("compile", "eager; acts on launch overhead + compute", 0.04, 1.3, True)],
        ceilings=Ceilings(1e14, 1e12), notes=["a note"], causes=[],
        fp8=gains(FP8_GEMMS, FP8_FLOPS, by_id("h100-sxm"), "the GPU named"))
    fields.update(change)
    return AuditReport(**fields)
