"""A deep model planned from a few of its blocks: trace two depths, extrapolate to all of them.

A transformer's blocks are identical: each adds the same parameters, gradients, optimizer state and
saved activations, the same FLOPs and the same collectives. So the planned step is traced with only
`DEPTHS` = 2 and 3 of its blocks (the rest cut from the model built on `meta`), and every figure is
extrapolated along the line through the two to the model's own depth L:

    x(L) = x(2) + (L − 2) · (x(3) − x(2))

for what every block adds (its share of the parameters, gradients and optimizer state, its saved
activations: the tracker's kinds in `PER_BLOCK`), separately for the peak while the step computes and the
peak while the optimizer steps (whichever is larger at L is the plan's peak, even when the other is
larger at depth 2); per FLOP phase; and for the replayed step time, compute, communication and exposed
communication. What does not grow with depth (FSDP's gathered units and its all-gather and reduce-scatter
buffers, the backward's temporaries) is taken as the larger of the two traces: which of them is in flight
at the moment of the peak can differ between two shallow models. Two and three
blocks, not one and two: with FSDP the last block is still gathered when the backward starts and the
next one is prefetched, a pattern a model of one block cannot show. Depth 2 is the first where every
block but the first and last behaves as the middle blocks of a deep model do.

Where the blocks differ (parameters of other shapes, a Hugging Face config whose `layer_types` mix kinds,
dense and mixture-of-experts layers), or a model has fewer than `MIN_BLOCKS` blocks, the whole model is
traced. `traced` caches its traces: a plan that re-plans the same step (`--ac auto`, the suggestions, the
lesson's panel) traces it once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from perflab.plan.cluster import Cluster
from perflab.plan.step import FLOP_PHASES, Layout, StepTrace, find_blocks, parts_of, run_step

DEPTHS = (2, 3)
MIN_BLOCKS = 5  # below this, tracing the whole model costs about as much as two depths
_CACHE_SIZE = 64
_traces: OrderedDict[tuple, StepTrace] = OrderedDict()
_shapes: OrderedDict[Any, tuple[int, bool]] = OrderedDict()


def _cluster_key(c: Cluster) -> tuple:
    return (c.gpu_id, c.gpus_per_node, c.nics_per_node, c.inter_gbps, c.intra_gbps)


def blocks_of(make_target: Callable[[], Any]) -> tuple[int, bool]:
    """(how many repeated blocks the target's model has, whether they are identical), from one build on
    `meta`, remembered for this `make_target`."""
    if make_target in _shapes:
        return _shapes[make_target]
    with torch.device("meta"):
        model = make_target().model
    found = find_blocks(model)
    if found is None:
        out = (0, False)
    else:
        shapes = {tuple((n, tuple(p.shape), p.dtype) for n, p in blk.named_parameters()) for blk in found[1]}
        kinds = set(getattr(getattr(model, "config", None), "layer_types", None) or ["one"])
        out = (len(found[1]), len(shapes) == 1 and len(kinds) == 1)
    _shapes[make_target] = out
    while len(_shapes) > _CACHE_SIZE:
        _shapes.popitem(last=False)
    return out


def traced(make_target: Callable[[], Any], layout: Layout, c: Cluster, recompute: frozenset[str] | None = None,
           whole: bool = False) -> StepTrace:
    """The step of `make_target()` on `layout`: traced at two depths and extrapolated (module docstring),
    or whole (`whole`, or a model whose blocks differ or are few)."""
    n, same = blocks_of(make_target)
    if whole or not same or n < MIN_BLOCKS:
        return _cached(make_target, layout, c, recompute, None)
    a, b = (_cached(make_target, layout, c, recompute, d) for d in DEPTHS)
    return extrapolate(a, b, n)


def _cached(make_target, layout: Layout, c: Cluster, recompute, depth: int | None) -> StepTrace:
    key = (make_target, layout, _cluster_key(c), recompute, depth)
    if key in _traces:
        _traces.move_to_end(key)
        return _traces[key]
    tr = run_step(make_target, layout, c, recompute, depth)
    _traces[key] = tr
    while len(_traces) > _CACHE_SIZE:
        _traces.popitem(last=False)
    return tr


def cached() -> int:
    """How many traces are remembered now."""
    return len(_traces)


def forget() -> None:
    """Drop every cached trace (a model file that changed, a test that wants a fresh trace)."""
    _traces.clear()
    _shapes.clear()


# the tracker's kinds that every block adds to (its share of the parameters, gradients and optimizer state, its
# saved activations); the others are buffers of the units in flight (FSDP's gathered parameters and its
# all-gather and reduce-scatter buffers, the backward's temporaries), as many at depth 3 as at depth 80; except
# the optimizer step's temporaries, which foreach AdamW sizes to the whole parameter group (torch/optim/adam.py)
PER_BLOCK = ("sharded param", "parameter", "buffer", "sharded grad", "gradient", "optstate", "activation")


def extrapolate(a: StepTrace, b: StepTrace, n_blocks: int) -> StepTrace:
    """The trace of the whole model from traces at depths a.depth and a.depth + 1 (module docstring): the
    kinds every block adds to along the line through the two, the others as the larger of the two (the
    units in flight at a phase's peak can differ between two shallow models)."""
    da, db = a.depth or 0, b.depth or 0
    k = (n_blocks - da) / (db - da)

    def line(x: float, y: float) -> float:
        return x + k * (y - x)

    phase_kinds: dict[str, dict[str, int]] = {}
    for ph in a.phase_kinds:
        ka, kb = a.phase_kinds[ph], b.phase_kinds[ph]
        grows = PER_BLOCK + (("temp",) if ph == "optimizer" else ())  # foreach AdamW's group-sized temporaries
        phase_kinds[ph] = {kk: max(0, round(line(ka.get(kk, 0), kb.get(kk, 0)))) if kk in grows
                           else max(ka.get(kk, 0), kb.get(kk, 0)) for kk in set(ka) | set(kb)}
    phases = {ph: parts_of(kinds) for ph, kinds in phase_kinds.items()}
    peak_phase = max(phases, key=lambda ph: sum(phases[ph].values()))
    parts = phases[peak_phase]
    flops = {ph: line(a.flops[ph], b.flops[ph]) for ph in FLOP_PHASES}
    causal = {ph: line(a.causal_flops[ph], b.causal_flops[ph]) for ph in FLOP_PHASES}
    timeline = a.timeline.scaled(b.timeline, k) if a.timeline and b.timeline else None
    notes = list(b.notes) + [f"traced with {da} and {db} of the model's {n_blocks} identical blocks and extrapolated "
                             "to all of them (perflab.plan.scale)"]
    return replace(b, parts=parts, peak_bytes=sum(parts.values()), tracker_kinds=phase_kinds[peak_phase], events=[],
                   flops=flops, module_seconds={}, notes=notes, causal_flops=causal, depth=None, phases=phases,
                   timeline=timeline, phase_kinds=phase_kinds)
