"""Lesson 07's sizes by where it runs: smoke (the tests), a CPU, a GPU. One table, read once by the lesson
(`size = ctx.sizes(SIZES)`, the rule in `perflab.core.sizes`).

The lesson's setting is the same everywhere (batch 4, 5 ms of IO per sample, no transform); what changes
is how long each point is measured. The CPU sizes keep the lesson within about a minute on a 2-core
machine; a GPU measures more steps per point. Smoke sizes shorten the step to 8 ms and measure two worker
counts, so that the tests run the whole lesson in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    compute_ms: float  # sections 2-3: the step's compute, ms (real matmuls, calibrated here)
    workers: tuple[int, ...]  # section 3: worker counts measured...
    around_cores: bool  # ...and, when True, also this machine's cores and cores + 2
    batches: int  # section 3: steps measured per worker count
    live_batches: int  # section 5: steps per point of the live panel
    live_transform_ms: float  # section 5: the second setting shown beside the panel (transform work per sample)
    persistent_batches: int  # section 6: steps per epoch, persistent_workers off and on
    prefetch_factors: tuple[int, ...]  # section 6: prefetch_factor values...
    prefetch_batch_sizes: tuple[int, ...]  # ...times these batch sizes
    prefetch_batches: int  # ...steps each
    pinned_bytes: int  # section 7 (GPU only): bytes per batch of the copy variants
    pinned_steps: int
    pin_bytes: int  # section 7 (GPU only): bytes pinned to time the pinning itself
    shuffle_sizes: tuple[int, ...]  # section 8: permutation lengths timed (big_shuffle adds BIG_SHUFFLE)
    parity_n: int  # section 8: entries whose parity pattern is counted
    batch: int = 4  # the lesson's setting: samples per batch,
    io_ms: float = 5.0  # IO latency per sample (a wait), ms,
    transform_ms: float = 0.0  # transform work per sample, ms

    def worker_counts(self, cores: int) -> list[int]:
        """The worker counts section 3 measures on a machine with `cores` cores, ascending."""
        extra = {cores, cores + 2} if self.around_cores else set()
        return sorted(set(self.workers) | extra)


BIG_SHUFFLE = (10**7, 10**8)  # the lesson's `big_shuffle = True`: about 90 s more on a 2-core CPU

SIZES: dict[str, Sizes] = {
    "smoke": Sizes(compute_ms=8.0, workers=(0, 2), around_cores=False, batches=8, live_batches=5, live_transform_ms=1,
                   persistent_batches=4, prefetch_factors=(1, 4), prefetch_batch_sizes=(4,), prefetch_batches=4,
                   pinned_bytes=16 << 20, pinned_steps=3, pin_bytes=16 << 20, shuffle_sizes=(10**4, 10**5),
                   parity_n=1 << 12),
    "cpu": Sizes(compute_ms=20.0, workers=(0, 1, 2), around_cores=True, batches=16, live_batches=10, live_transform_ms=4,
                 persistent_batches=10, prefetch_factors=(1, 2, 4), prefetch_batch_sizes=(4, 16), prefetch_batches=8,
                 pinned_bytes=256 << 20, pinned_steps=8, pin_bytes=1 << 30, shuffle_sizes=(10**5, 10**6),
                 parity_n=1 << 20),
    "gpu": Sizes(compute_ms=20.0, workers=(0, 1, 2), around_cores=True, batches=30, live_batches=10, live_transform_ms=4,
                 persistent_batches=10, prefetch_factors=(1, 2, 4), prefetch_batch_sizes=(4, 16), prefetch_batches=12,
                 pinned_bytes=256 << 20, pinned_steps=8, pin_bytes=1 << 30, shuffle_sizes=(10**5, 10**6),
                 parity_n=1 << 20),
}
