"""Which activations to recompute so that a step fits a memory budget, at the least extra time.

* **Full** (`--ac full`): every block is checkpointed: its forward runs again in the backward and only
  its input is kept (Chen et al. 2016, *Training Deep Nets with Sublinear Memory Cost*, arXiv:1604.06174).
* **Selective, chosen for a budget** (`--ac auto`): torch's `SACEstimator` runs one block's forward
  in `FakeTensorMode` and lists, for every operator the block ran, the bytes its saved output holds
  and the seconds it takes (here: perflab.plan.cost's roofline on the target GPU), ordered by memory
  saved per second of recompute, most first (its greedy order, `sac_mod_greedy_order_meta`). perflab
  takes operators by name in that order (every instance in every block: a policy is a set of names,
  as torch's `create_selective_checkpoint_contexts` policies and torchtitan's op-level SAC are), and
  after each choice plans the step again with that policy applied, until the measured peak fits.
  Products and attention come last in that order: they cost the most time per byte they free, so a
  policy that fits usually recomputes pointwise work and norms and keeps the matmuls' outputs.

torch's `sac_milp` (an integer program over modules, `torch.distributed._tools.sac_ilp`) needs the
`pulp` solver; perflab uses the greedy order, which is what that package computes its trade-off
curves from.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from perflab.plan.cost import Cluster
from perflab.plan.step import Layout, _fake_batch, _first_batch, _Recorder, fake_group, find_blocks


@dataclass(frozen=True)
class OpChoice:
    """One operator name in the greedy order: what recomputing it frees in one block, and costs."""

    name: str
    bytes_per_block: int
    seconds_per_block: float

    @property
    def bytes_per_second(self) -> float:
        return self.bytes_per_block / self.seconds_per_block if self.seconds_per_block > 0 else float("inf")


def greedy_order(make_target: Callable[[], Any], layout: Layout, c: Cluster) -> tuple[list[OpChoice], int]:
    """(operator names in torch's SAC greedy order with their memory and time per block, number of
    blocks), from one forward of the unsharded model under `SACEstimator`. Per-rank bytes and seconds
    under tensor parallelism are the block's divided by `layout.tp`."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.sac_estimator import SACEstimator

    from perflab.audit.target import default_loss
    from perflab.core.errors import InputError

    with torch.device("meta"):
        target = make_target()
    found = find_blocks(target.model)
    if not found:
        raise InputError("--ac auto needs repeated blocks to recompute (a ModuleList of layers): this model has none")
    name, blocks = found
    batch = _first_batch(target)
    loss_fn = target.loss_fn or default_loss
    one = Layout(gpus=1, dtype=layout.dtype)
    rec = _Recorder(c, one)
    with fake_group(1), FakeTensorMode(allow_non_fake_inputs=True):
        target.model.to_empty(device="cpu")
        sac = SACEstimator()
        sac._estimate_runtime = rec  # the roofline of the target GPU
        fb = _fake_batch(batch)
        with sac, contextlib.redirect_stdout(io.StringIO()):
            with torch.autocast("cpu", dtype=torch.bfloat16) if layout.dtype == "bf16" else contextlib.nullcontext():
                loss_fn(target.model, fb)
    meta = sac.sac_mod_greedy_order_meta.get(f"{type(target.model).__name__}.{name}.0") or \
        next((v for k, v in sac.sac_mod_greedy_order_meta.items() if k.endswith(f"{name}.0")), None)
    if meta is None:
        raise InputError("torch's SAC estimator saw no operator in the model's first block")
    order: dict[str, list[float]] = {}
    for m in meta.msps_meta:
        for fn in sorted(m.func_names):
            op = str(fn).split(".")[-1] if "." in str(fn) else str(fn)
            mem, secs = order.setdefault(op, [0.0, 0.0])
            share = len(m.func_names)
            order[op] = [mem + m.memory / share, secs + m.runtime / 1e3 / share]
    t = layout.tp
    return [OpChoice(k, int(v[0] / t), v[1] / t) for k, v in order.items() if v[0] > 0], len(blocks)


def choose(order: list[OpChoice], need_bytes: float, n_blocks: int) -> list[OpChoice]:
    """The first names of the greedy order whose outputs, in every block, free at least `need_bytes`
    (all of them when even that is not enough)."""
    out, freed = [], 0.0
    for op in order:
        if freed >= need_bytes:
            break
        out.append(op)
        freed += op.bytes_per_block * n_blocks
    return out
