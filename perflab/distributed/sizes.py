"""Lesson 06's sizes by where its ranks run: smoke (the tests), CPU ranks (gloo), GPU ranks (NCCL).

Unlike the other lessons' tables, the row is chosen by the **backend the ranks get**, not by the
notebook's device: NCCL needs one GPU per rank, so a box with fewer GPUs than ranks (one H100, say)
runs its ranks on gloo with CPU tensors, and those ranks get the CPU row. The GPU row (messages up to
1 GiB, half a second per size) only fills NCCL links; on gloo it made the bandwidth sweep crawl
through gigabytes of loopback copies.

    >>> setup = for_lesson(nproc=4, backend=None, smoke=False)
    >>> print(setup.line())     # '4 ranks · backend gloo · no GPU here: gloo on CPU tensors'
    >>> setup.size.check_k      # the elements each rank checks per primitive
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Sizes:
    max_ranks: int | None  # the lesson's ranks are capped here (smoke: two start in half the time of four)
    check_k: int  # section 2: float64 elements each rank checks per primitive
    slow_s: float  # section 3: rank r works r × slow_s before the barrier
    ring_numel: int  # section 5: elements of the ring all-reduce
    hang_demo: bool  # section 4: the hanging rank (it waits for its timeout)
    hang_timeout_s: float
    sweep_sizes: tuple[int, ...] | None  # section 6: message sizes (bytes); None: nccl-tests' ×4 steps up to sweep_largest
    sweep_largest: int
    sweep_budget_s: float  # seconds of timed calls per size
    ddp_width: int  # section 8: the MLP's width
    ddp_steps: int  # optimizer steps of gradient accumulation
    ddp_hook_steps: int  # steps per communication hook
    ddp_ranks_per_node: int | None  # ranks per simulated node (None: half the lesson's ranks)

    def ranks(self, nproc: int) -> int:
        """The ranks this run starts for the lesson's `nproc`."""
        return min(nproc, self.max_ranks) if self.max_ranks else nproc

    def per_node(self, nproc: int) -> int:
        """Ranks per node of section 8's two simulated nodes."""
        return self.ddp_ranks_per_node or max(1, nproc // 2)

    def message_sizes(self, op: str, nproc: int) -> list[int]:
        """Section 6's message sizes (bytes) for `op` on `nproc` ranks."""
        from perflab.distributed.busbw import default_sizes

        return list(self.sweep_sizes) if self.sweep_sizes else default_sizes(op, nproc, largest=self.sweep_largest)


SIZES: dict[str, Sizes] = {
    "smoke": Sizes(max_ranks=2, check_k=1024, slow_s=0.1, ring_numel=4096, hang_demo=False, hang_timeout_s=10.0,
                   sweep_sizes=(4 << 10, 64 << 10, 1 << 20), sweep_largest=1 << 20, sweep_budget_s=0.03, ddp_width=128,
                   ddp_steps=3, ddp_hook_steps=5, ddp_ranks_per_node=1),
    "cpu": Sizes(max_ranks=None, check_k=1 << 16, slow_s=0.2, ring_numel=1 << 16, hang_demo=True, hang_timeout_s=10.0,
                 sweep_sizes=None, sweep_largest=1 << 26, sweep_budget_s=0.2, ddp_width=256, ddp_steps=4,
                 ddp_hook_steps=8, ddp_ranks_per_node=None),
    "gpu": Sizes(max_ranks=None, check_k=1 << 20, slow_s=0.2, ring_numel=1 << 20, hang_demo=True, hang_timeout_s=10.0,
                 sweep_sizes=None, sweep_largest=1 << 30, sweep_budget_s=0.5, ddp_width=512, ddp_steps=4,
                 ddp_hook_steps=8, ddp_ranks_per_node=None),
}


@dataclass(frozen=True)
class Setup:
    """The lesson's ranks: how many, on which backend and why, and the sizes that backend gets."""

    nproc: int
    backend: Any  # perflab.distributed.outcome.BackendChoice
    size: Sizes

    def line(self) -> str:
        return f"{self.nproc} ranks · backend {self.backend.name} · {self.backend.reason}"


def for_lesson(nproc: int, backend: str | None, smoke: bool) -> Setup:
    """The ranks lesson 06 starts, their backend (`torchrun.choose_backend`) and their row of SIZES:
    'smoke' in smoke mode, 'gpu' when the ranks get NCCL, 'cpu' when they get gloo."""
    from perflab.core.sizes import for_run
    from perflab.distributed.torchrun import choose_backend

    n = SIZES["smoke"].ranks(nproc) if smoke else nproc
    choice = choose_backend(n, backend)
    return Setup(n, choice, for_run(SIZES, smoke, choice.device))
