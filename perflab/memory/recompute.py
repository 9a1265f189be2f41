"""Gradient checkpointing measured: activation memory and forward+backward time with and without
recomputing every block (lesson 03).

    >>> ck = checkpointing_effect(preset("small-gpt"), batch=4)
    >>> ck.saved_bytes, ck.predicted_saved_bytes, ck.time_ratio
    >>> ck.table()                    # measured and predicted bytes, and the time, for a person

Memory is the allocator's count of bytes the forward pass leaves alive (exact on CPU and GPU,
`perflab.memory.probe.allocated_during`); the prediction is
`perflab.memory.estimate.model_activation_bytes` (recompute 'none' vs 'full'). Recomputation adds one
forward to forward+backward: FLOPs grow from 3 to 4 forward-equivalents (4/3 ≈ 1.33×), which bounds
the time cost from above when the step is compute-bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from perflab.core.quietness import UNKNOWN, Quietness
from perflab.memory.estimate import activation_total, model_activation_bytes
from perflab.memory.probe import allocated_during, torch_dtype

FLOP_RATIO = 4 / 3  # forward + backward with every block recomputed: 4 forward-equivalents instead of 3


@dataclass(frozen=True)
class Side:
    """One side of the comparison: every activation stored, or every block recomputed."""

    activation_bytes: int  # kept alive by the forward pass (the allocator's count)
    forward_peak_bytes: int  # the forward's peak above its start
    predicted_bytes: int  # perflab.memory.estimate's activations (+ the CPU's saved RNG states when recomputing)
    step_s: float  # forward + backward, median seconds
    step_q25_s: float
    step_q75_s: float
    step_iqr_s: float
    quietness: Quietness = UNKNOWN  # the machine while this side's kept round was timed


@dataclass(frozen=True)
class CheckpointingEffect:
    """Activation memory and forward+backward time of one model, without and with recomputation."""

    model: str
    batch: int
    seq: int
    dtype: str
    device: str
    stored: Side
    checkpointed: Side

    @property
    def saved_bytes(self) -> int:
        return self.stored.activation_bytes - self.checkpointed.activation_bytes

    @property
    def predicted_saved_bytes(self) -> int:
        return self.stored.predicted_bytes - self.checkpointed.predicted_bytes

    @property
    def time_ratio(self) -> float:
        """Recomputed forward+backward time over stored (measured)."""
        return self.checkpointed.step_s / self.stored.step_s

    @property
    def flop_ratio(self) -> float:
        return FLOP_RATIO

    @property
    def quietness(self) -> Quietness:
        """The machine while both sides were timed: disturbed if either was."""
        return Quietness.combine([self.stored.quietness, self.checkpointed.quietness])

    def headline(self) -> float | None:
        """The measured time ratio, or None when the machine was busy while it was timed (no figure to judge a
        prediction by)."""
        return None if self.quietness.disturbed else self.time_ratio

    def verdict(self) -> str:
        """The time ratio beside the FLOPs' 4/3, or why there is none (a busy machine)."""
        from perflab.core.verdicts import busy_text

        if self.quietness.disturbed:
            return busy_text(self.quietness.cause)
        return (f"forward + backward took {self.time_ratio:.2f}× as long with every block recomputed; its FLOPs grow "
                f"{self.flop_ratio:.2f}× ({self.quietness.line()})")

    def memory_text(self) -> str:
        """The activations recomputing saved, measured and predicted."""
        from perflab.core.readout import binary_bytes

        gap = self.saved_bytes - self.predicted_saved_bytes
        return (f"recomputing saved {binary_bytes(self.saved_bytes)} of activations ({self.saved_bytes:,} bytes); "
                f"predicted {self.predicted_saved_bytes:,} bytes: "
                + ("equal to the byte" if gap == 0 else f"{gap:+,} bytes apart ({gap / self.predicted_saved_bytes:+.2%})"))

    def table(self):
        """Measured and predicted activation bytes and forward+backward time, one row per side and
        one for what recomputing saves and costs."""
        import pandas as pd

        from perflab.core.readout import binary_bytes

        rows = [{"": label, "measured": binary_bytes(s.activation_bytes), "predicted": binary_bytes(s.predicted_bytes),
                 "fwd+bwd (ms)": s.step_s * 1e3}
                for label, s in (("activations stored", self.stored), ("blocks recomputed", self.checkpointed))]
        rows.append({"": "saved / cost", "measured": binary_bytes(self.saved_bytes),
                     "predicted": binary_bytes(self.predicted_saved_bytes),
                     "fwd+bwd (ms)": f"× {self.time_ratio:.2f} (FLOPs × {self.flop_ratio:.2f})"})
        return pd.DataFrame(rows)


def checkpointing_effect(cfg, *, batch: int, seq: int | None = None, dtype: str = "fp32", device=None,
                         rep_ms: float = 200.0, warmup_ms: float = 50.0, rounds: int = 2, min_reps: int = 5,
                         seed: int = 0) -> CheckpointingEffect:
    """Activation memory and forward+backward time of perflab's model with and without
    `model.checkpointing` (every block recomputed in the backward), module docstring.

    The forward and backward passes are the course's training step's (`StepRunner.accumulate`, no
    optimizer step), timed alternately `rounds` times with `perflab.core.timing.bench`; each side keeps
    its better round."""
    import torch

    from perflab.core.device import pick_device
    from perflab.core.timing import BenchResult, bench
    from perflab.core.validate import positive_int
    from perflab.workload.models import build_model
    from perflab.workload.train import StepRunner, make_batches, model_loss

    dev = pick_device(device) if device is None or isinstance(device, str) else torch.device(device)
    b = positive_int("batch", batch)
    s = positive_int("seq", seq if seq is not None else cfg.seq_len, maximum=cfg.seq_len)
    model = build_model(cfg, device=dev, dtype=torch_dtype(dtype), seed=seed)
    data = make_batches(cfg, b, s, device=dev, seed=seed)[0]
    mem: dict[bool, tuple[int, int, int]] = {}
    for ckpt in (False, True):
        model.checkpointing = ckpt
        m = allocated_during(lambda: model_loss(model, data), dev)
        pred = activation_total(model_activation_bytes(cfg, b, s, dtype=dtype, recompute="full" if ckpt else "none",
                                                       device=dev.type))
        if ckpt and dev.type == "cpu":
            from perflab.memory.estimate import CPU_RNG_STATE_BYTES

            pred += cfg.layers * CPU_RNG_STATE_BYTES
        mem[ckpt] = (m["kept_bytes"], m["peak_bytes"], pred)

    runner = StepRunner(model)
    # time the two alternately, `rounds` times, and keep each one's better round: a machine shared
    # with other work drifts, and alternating exposes both to the same drift
    best: dict[bool, BenchResult] = {}
    for _ in range(positive_int("rounds", rounds)):
        for ckpt in (False, True):
            model.checkpointing = ckpt
            t = bench(lambda: runner.accumulate([data]), warmup_ms=warmup_ms, rep_ms=rep_ms / rounds, device=dev,
                      min_reps=min_reps, grad_to_none=list(model.parameters()))
            if ckpt not in best or t.median_s < best[ckpt].median_s:
                best[ckpt] = t
    model.checkpointing = False

    def side(ckpt: bool) -> Side:
        t = best[ckpt]
        kept, peak, pred = mem[ckpt]
        return Side(kept, peak, pred, t.median_s, t.quantile(0.25), t.quantile(0.75), t.iqr_s, t.quietness)

    return CheckpointingEffect(cfg.name, b, s, dtype, dev.type, side(False), side(True))
