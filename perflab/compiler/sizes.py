"""Lesson 10's sizes by where it runs: smoke (the tests), a CPU, a GPU. One table, read once by the lesson
(`size = ctx.sizes(SIZES)`, `perflab.core.sizes`).

The CPU sizes keep the lesson near a minute on a 2-core machine with a warm inductor cache: the
course's tiny Llama, and dynamo's eager backend for sections 3 and 4 (the lesson's `inductor=True`
compiles their kernels too, about 2 minutes more with a cold cache). Smoke mode times section 1 with
the eager backend as well (dynamo only: seconds, not tens), traces a one-block model for the
recompile count (the counts do not depend on the model's size) and one block for checkpointing, and
leaves inductor's generated kernel out (a first inductor compile takes about 20 s on a CPU). A GPU
measures the small Llama and compiles every section with the inductor.
"""

from __future__ import annotations

from dataclasses import dataclass

BACKENDS = ("inductor", "eager")


@dataclass(frozen=True)
class Sizes:
    model: str  # sections 1 and 3: the course's model (a `perflab.workload.models` preset)
    seq: int  # tokens per sequence
    steps: int  # timed training steps of each run (sections 1 and 3)
    speed_backend: str  # section 1's compiled run: "inductor", or "eager" (dynamo only)
    deep_backend: str  # sections 3 and 4 by default: "inductor" or "eager" (the lesson's `inductor` overrides it)
    ck_layers: int | None  # section 4: the model's blocks for checkpointing (None: all of them)
    ck_batch: int
    ck_seq: int
    ck_steps: int  # timed steps per checkpointing row
    fused_rows: int  # section 6: the fused kernel's checked shape
    fused_cols: int
    batch: int = 2  # sequences per batch (sections 1 to 3)
    # section 2: FixedLM's dimensions for the recompile count (empty: its defaults)
    recompile_dims: tuple[tuple[str, int], ...] = ()
    inductor_allowed: bool = True  # False: the lesson's `inductor=True` is ignored (smoke mode stays quick)
    inductor_code: bool = True  # section 6 shows the kernel inductor generates

    def backend(self, inductor: bool | None = None) -> str:
        """Sections 3 and 4's backend: "inductor" where `inductor` asks for it (or, left None, where this
        size compiles kernels by default), else "eager" (dynamo only)."""
        if not self.inductor_allowed:
            return "eager"
        if inductor is None:
            return self.deep_backend
        return "inductor" if inductor else "eager"


SIZES: dict[str, Sizes] = {
    "smoke": Sizes(model="tiny-llama", seq=32, steps=3, speed_backend="eager", deep_backend="eager", ck_layers=1,
                   ck_batch=4, ck_seq=64, ck_steps=1, fused_rows=8, fused_cols=1500,
                   recompile_dims=(("hidden", 32), ("heads", 2), ("layers", 1), ("d_ff", 64)),
                   inductor_allowed=False, inductor_code=False),
    "cpu": Sizes(model="tiny-llama", seq=64, steps=5, speed_backend="inductor", deep_backend="eager", ck_layers=None,
                 ck_batch=4, ck_seq=64, ck_steps=2, fused_rows=64, fused_cols=3000),
    "gpu": Sizes(model="small-llama", seq=128, steps=10, speed_backend="inductor", deep_backend="inductor",
                 ck_layers=None, ck_batch=8, ck_seq=128, ck_steps=10, fused_rows=256, fused_cols=4096),
}
