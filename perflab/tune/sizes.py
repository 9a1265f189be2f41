"""Lesson 11's sizes by where it runs: smoke (the tests), a CPU, a GPU. One table, read once by the lesson
(`size = ctx.sizes(SIZES)`, `perflab.core.sizes`).

The ladder's own sizes are its presets (`perflab.tune.ladder.PRESETS`: the model, the global and micro
batch, the timed pairs, the memory budget), shared with lab 11 and `perflab tune`; this table names the
preset each kind of run climbs, the rungs the lesson leaves to `perflab tune` (smoke mode leaves the
compile rung out: its first compile costs tens of seconds on a small CPU), and the size of section 7's
audit (a Hugging Face GPT-2 built from its config: the overrides, batch, sequence and timed steps).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    preset: str  # the ladder's preset (`perflab.tune.ladder.preset`)
    audit_model: tuple[tuple[str, int], ...]  # section 7: GPT-2's config overrides (transformers' names)
    audit_batch: int
    audit_seq: int
    audit_steps: int
    audit_breaks: bool = True  # section 7: trace dynamo's graph breaks (left out in smoke mode to stay quick)
    skip_rungs: tuple[str, ...] = ()  # rungs the lesson leaves to `perflab tune`

    def rungs(self) -> list[str]:
        """The ladder's rungs the lesson climbs, in the ladder's order, the baseline first."""
        from perflab.tune.ladder import RUNG_NAMES

        return [r for r in RUNG_NAMES if r not in self.skip_rungs]


SIZES: dict[str, Sizes] = {
    "smoke": Sizes("smoke", (("n_layer", 1), ("n_embd", 32), ("n_head", 2), ("vocab_size", 128), ("n_positions", 32)),
                   audit_batch=2, audit_seq=16, audit_steps=2, audit_breaks=False, skip_rungs=("compile",)),
    "cpu": Sizes("cpu", (("n_layer", 2), ("n_embd", 128), ("n_head", 4), ("n_positions", 128)),
                 audit_batch=4, audit_seq=64, audit_steps=3),
    "gpu": Sizes("gpu", (("n_layer", 4), ("n_embd", 256), ("n_head", 4)), audit_batch=8, audit_seq=512, audit_steps=10),
}
