"""Lesson 10's "explain" steps, computed from what was measured (never a fixed sentence).

    >>> print(explain_speed(sp))             # why compile gained, lost or broke even here
    >>> print(explain_recompiles(rows))      # why each dynamic-shape setting compiled that many graphs
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from perflab.compiler.speed import short_time
from perflab.core.readout import num
from perflab.core.verdicts import busy_text

seconds = short_time  # two significant digits, no padded zeros (a shared CPU's step times support no more)


EVEN = 0.10  # within ±10% the two step times are called equal (a shared CPU's timing noise)


def explain_speed(sp: Any, *, backend: str = "inductor") -> str:
    """Why the compiled step was faster, slower or the same, and when compiling pays off; from a
    measurement taken while the machine was busy, no verdict (`perflab.core.verdicts.busy_text`)."""
    s = sp.speedup
    lines = [f"eager {seconds(sp.eager_step_s)} per step, compiled {seconds(sp.compiled_step_s)}: "
             f"{num(s, 2)}× ({backend})."]
    quietness = getattr(sp, "quietness", None)
    if quietness is not None and quietness.disturbed:  # no verdict from a busy machine
        lines.append(busy_text(quietness.cause) + ": run the cell again when it is quiet.")
        lines.append(f"Compiling took {seconds(sp.compile_s)}.")
        return "\n".join(lines)
    if backend != "inductor":
        lines.append("The eager backend runs the captured graph with the same eager kernels: there is nothing "
                     "fused, so the steps should match; a difference is the guard checks and timing noise.")
    elif s >= 1 + EVEN:
        lines.append("Faster: the inductor fused the many small elementwise ops of the forward and backward "
                     "(norms, activations, RoPE, the loss) into a few loops, so fewer passes over memory and fewer "
                     "dispatcher calls; the matmuls themselves were already library calls.")
    elif s < 0.5:
        lines.append("Far slower — more than a compiled wrapper's per-call cost explains: most likely the timed steps "
                     "still compiled (a recompile, or the backward compiled on first use) or the machine was busy. "
                     "Run the cell again: the compiled kernels are cached now.")
    elif s <= 1 - EVEN:
        lines.append("Slower: on this model the fused loops do not win back what the compiled wrapper costs per call "
                     "(guard checks, the AOTAutograd boundary) — typical when the step is dominated by a few large "
                     "matmuls that were already one library call each.")
    else:
        lines.append(f"Within ±{EVEN:.0%}: no gain worth the compile on this model and device.")
    be = sp.break_even_steps
    if math.isfinite(be):
        lines.append(f"Compiling took {seconds(sp.compile_s)}: it pays for itself after {num(be)} steps "
                     f"(compile time ÷ time saved per step).")
    else:
        lines.append(f"Compiling took {seconds(sp.compile_s)} and saves nothing per step here: it never pays off.")
    return "\n".join(lines)


REASONS = {
    "static (dynamic=False)": "every new length fails the shape guard and is compiled again, specialised to it",
    "default": "the first length is compiled static; when the second fails the shape guard, dynamo recompiles "
               "with that dimension symbolic (automatic dynamic shapes), and later lengths reuse it",
    "dynamic=True": "the first graph is compiled with symbolic shapes, so every length passes its guards",
    "mark_dynamic": "mark_dynamic declares the length symbolic before the first compile: one graph for all",
}


def explain_recompiles(rows: Sequence[dict[str, Any]]) -> str:
    """One line per setting: how many graphs after the last length, and why (from REASONS)."""
    out = []
    for r in rows:
        counts = [v for k, v in r.items() if k.startswith("graphs after")]
        last = counts[-1] if counts else None
        why = REASONS.get(r["setting"], "")
        out.append(f"{r['setting']}: {last} graph{'s' if last != 1 else ''} after {len(counts)} lengths — {why}.")
    return "\n".join(out)
