"""The flops lessons' sizes by where they run: smoke (the tests), a CPU, a GPU. One table per lesson, read once
by the lesson (`size = ctx.sizes(MFU)`, `perflab.core.sizes`).

`MFU`, lesson 02 (MFU vs HFU): the training step it measures without and with checkpointing, the panel's
steps, the gradient-accumulation sweep and the garbage-collector series. A GPU trains GPT-2 small on 16
sequences of 1,024 tokens; a CPU the course's tiny GPT on 8 of 128, which keeps the lesson near a minute
on a 2-core machine; smoke sizes only check that every cell runs. A CPU and a GPU measure the MFU's basis
at its one shape (`perflab.flops.basis.ceiling_shape`); smoke mode at 256³, which takes milliseconds.

`RATES`, lesson 01 (FLOPs, MACs and FLOP/s): the one matmul turned from a count into a rate, the
roofline's matmul sweep, the elementwise add and the copy that measures a CPU's memory roof, and the
panel's matmul. A GPU measures up to 16384³ and 1 GiB copies; a CPU up to 2048³ and 256 MiB, within
about a minute on a 2-core machine; smoke sizes only check that every cell runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class MfuSizes:
    """Lesson 02's sizes for one kind of run."""

    model: str  # a `perflab.workload.models` preset
    batch: int  # sequences per step
    seq: int  # tokens per sequence
    steps: int  # timed steps of each measurement
    warmup: int  # untimed steps before them (the first is counted with the FLOP counter)
    ceiling_size: int | None  # the basis's matmul measured at ceiling_size³; None: the one shape every MFU shares
    panel_steps: int  # steps the panel times per setting
    gas_values: tuple[int, ...]  # section 5: gradient-accumulation steps swept
    gas_steps: int
    gc_steps: int  # section 6: steps of each series, a collection forced every gc_collect_every with gc off
    gc_collect_every: int
    gc_batch: int
    gc_seq: int
    gc_full_every: int  # steps between Python's full collections with gc on (the garbage's size is set for it)

    def with_overrides(self, *, model: str | None = None, batch: int | None = None, seq: int | None = None,
                       steps: int | None = None) -> MfuSizes:
        """These sizes with the lesson's parameters where a learner gave them (None keeps the table's)."""
        given = {"model": model, "batch": batch, "seq": seq, "steps": steps}
        return replace(self, **{k: v for k, v in given.items() if v is not None})

    @property
    def gas_batch(self) -> int:
        """The micro-batch of the accumulation sweep: half the step's batch (its largest GAS adds up to more)."""
        return max(1, self.batch // 2)

    @property
    def panel_seq(self) -> int:
        """The panel's first sequence length: the step's, at most 128 (a tiny model's context)."""
        return min(self.seq, 128)

    @property
    def panel_batch(self) -> int:
        """The panel's first batch: the step's, at most 8 (a setting that answers in about a second)."""
        return min(self.batch, 8)


MFU: dict[str, MfuSizes] = {
    "smoke": MfuSizes(model="tiny-gpt", batch=4, seq=64, steps=2, warmup=1, ceiling_size=256, panel_steps=1,
                      gas_values=(1, 2), gas_steps=2, gc_steps=8, gc_collect_every=4, gc_batch=1, gc_seq=16,
                      gc_full_every=4),
    "cpu": MfuSizes(model="tiny-gpt", batch=8, seq=128, steps=8, warmup=2, ceiling_size=None, panel_steps=3,
                    gas_values=(1, 2, 4, 8), gas_steps=3, gc_steps=20, gc_collect_every=10, gc_batch=2, gc_seq=32,
                    gc_full_every=4),
    "gpu": MfuSizes(model="gpt2-small", batch=16, seq=1024, steps=20, warmup=3, ceiling_size=None, panel_steps=5,
                    gas_values=(1, 2, 4, 8, 16), gas_steps=5, gc_steps=60, gc_collect_every=20, gc_batch=8, gc_seq=128,
                    gc_full_every=10),
}


@dataclass(frozen=True)
class RatesSizes:
    """Lesson 01's sizes for one kind of run (milliseconds are time budgets of `perflab.core.timing.bench`)."""

    one_n: int  # section 2: the n³ matmul turned from a count into a rate
    one_rep_ms: float
    sweep_n: tuple[int, ...]  # section 3: the roofline's n³ matmuls
    rep_ms: float  # the sweep's, the add's and the copy's budgets
    add_numel: int  # a + b over this many elements
    copy_bytes: int  # the copy that measures the memory roof (a CPU has no datasheet bandwidth)
    panel_n: int  # section 4: the panel's first size and its largest
    panel_max_n: int


RATES: dict[str, RatesSizes] = {
    "smoke": RatesSizes(one_n=128, one_rep_ms=10, sweep_n=(64, 128, 256), rep_ms=5, add_numel=2**16, copy_bytes=2**22,
                        panel_n=64, panel_max_n=256),
    "cpu": RatesSizes(one_n=1024, one_rep_ms=200, sweep_n=(64, 128, 256, 512, 1024, 2048), rep_ms=100, add_numel=2**24,
                      copy_bytes=2**28, panel_n=512, panel_max_n=2048),
    "gpu": RatesSizes(one_n=8192, one_rep_ms=200, sweep_n=(256, 512, 1024, 2048, 4096, 8192, 16384), rep_ms=100,
                      add_numel=2**28, copy_bytes=2**30, panel_n=4096, panel_max_n=16384),
}
