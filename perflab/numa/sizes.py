"""Lesson 08's sizes by where it runs: smoke (the tests), a CPU, a GPU. One table, read once by the lesson
(`size = ctx.sizes(SIZES)`, the rule in `perflab.core.sizes`).

Lesson 08 reads more than it measures: the sizes are the memory each local-vs-remote probe copies (on a
machine with two NUMA nodes), how many local ranks it binds here, and whether it starts a torchrun job
with bound ranks (a few seconds per rank start: not in smoke mode).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    probe_bytes: int  # section 4: bytes each local/remote memory probe copies
    local_ranks: int  # section 3: ranks planned and bound on this machine (at most its CPUs)
    bound_launch: bool  # section 3: start a torchrun job whose ranks bind themselves


SIZES: dict[str, Sizes] = {
    "smoke": Sizes(probe_bytes=64 * 2**20, local_ranks=2, bound_launch=False),
    "gpu": Sizes(probe_bytes=512 * 2**20, local_ranks=2, bound_launch=True),  # a CPU runs these too
}
