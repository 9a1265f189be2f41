"""Lesson 14's sizes: the hunt's step (`HuntSizes`) by kind of run, one table read once by the lesson
(`size = ctx.sizes(SIZES)`, `perflab.core.sizes`), and by name across a process boundary (`named`).

The step runs on the CPU wherever the lesson runs (its regressions are the host's: the loader, the
collector, the threads, Python loops), so a CPU and a GPU share the lesson's sizes (the table has no
CPU row: a CPU runs the GPU's). Smoke mode, the tests' size, is the same shape with a smaller model and
batch, quicker reads and fewer rounds per comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

from perflab.core.errors import InputError
from perflab.workload.models import ModelConfig


@dataclass(frozen=True)
class HuntSizes:
    """The step's sizes: model, batch (sequences per step), storage latency per sequence, the epoch's
    length in steps, each worker's start (opening the data set), the clip norm and the learning rate;
    and the lesson's: its name (what a grader's process is told) and the rounds each comparison times."""

    cfg: ModelConfig
    batch: int = 4
    io_ms: float = 12.0
    epoch_steps: int = 4
    worker_start_s: float = 0.3
    workers: int = 2
    clip: float = 0.25
    lr: float = 1e-3
    stats_layers: int = 0  # 0: every Linear layer is logged by the host_stats hook
    threads: int = 1  # the clean step's intra-op threads
    name: str = "lesson"  # `named(name)` gives these sizes back (in a grader's process)
    reps: int = 3  # rounds of each interleaved comparison (the warm-up, the panel, each fix)

    @property
    def seq(self) -> int:
        return self.cfg.seq_len

    def describe(self) -> str:
        return (f"the step: {self.cfg.name}, batch {self.batch} sequences of {self.seq} tokens, "
                f"{self.epoch_steps} steps per epoch, {self.threads} intra-op thread(s)")


def _cfg() -> ModelConfig:
    from perflab.tune.ladder import CPU_CFG  # the capstone's GPT-shaped CPU model

    return CPU_CFG


LESSON = HuntSizes(_cfg())
# the tests' and the smoke run's size: the same shape, a smaller model and batch
SMOKE = HuntSizes(_cfg().with_(layers=1, hidden=64, heads=2, ffn=256, vocab=509, seq_len=32), batch=4, io_ms=2.0,
                  worker_start_s=0.06, name="smoke", reps=2)

SIZES: dict[str, HuntSizes] = {"smoke": SMOKE, "gpu": LESSON}


def named(name: str) -> HuntSizes:
    """The sizes called `name` ('lesson' or 'smoke'): how a process that measures for the grader is told
    which step to build."""
    table = {s.name: s for s in SIZES.values()}
    if name not in table:
        raise InputError(f"unknown sizes {name!r}: use {' or '.join(table)}")
    return table[name]
