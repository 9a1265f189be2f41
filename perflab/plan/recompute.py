"""Which activations to recompute so that a step fits a memory budget, at the least extra time.

* **Full** (`--ac full`): every block is checkpointed: its forward runs again in the backward and only
  its input is kept (Chen et al. 2016, *Training Deep Nets with Sublinear Memory Cost*, arXiv:1604.06174).
* **Selective, chosen for a budget** (`--ac auto`): torch's `SACEstimator` runs one block's forward
  in `FakeTensorMode` and lists, for every operator the block ran, the bytes its output holds and the
  seconds it takes (here: perflab.plan.cost's roofline on the target GPU). `greedy_order` gives them
  ordered by bytes freed per second of recompute, most first (torch's greedy order,
  `sac_mod_greedy_order_meta`), by name: a policy is a set of names, applied in every block, as torch's
  `create_selective_checkpoint_contexts` policies and torchtitan's op-level SAC are.
  Under selective checkpointing a block keeps its input and the outputs of the operators it does not
  recompute (the policy's cache), and nothing else: so a policy's memory is full recompute's plus what
  it saves. `--ac auto` saves operators from the end of the greedy order (those whose recompute costs
  the most time per byte: the large products, attention) while what they hold in every block fits the
  room the budget leaves above full recompute, and recomputes the rest; then plans the step with that
  policy and, while torch's tracker says it is over the budget, saves one operator fewer.
  Products and attention come last in the order: they cost the most time per byte they free, so a
  policy that fits usually recomputes pointwise work and norms and keeps the matmuls' outputs, as
  torchtitan's op-level policy does (torchtitan/distributed/activation_checkpoint.py, `_save_list`).

torch's `sac_milp` (an integer program over modules, `torch.distributed._tools.sac_ilp`) needs the
`pulp` solver; perflab uses the greedy order, which is what that package computes its trade-off
curves from.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from perflab.plan.cost import Cluster
from perflab.plan.step import (
    Layout,
    _fake_batch,
    _first_batch,
    _Recorder,
    canonical,
    cut_blocks,
    fake_group,
    find_blocks,
)


@dataclass(frozen=True)
class OpChoice:
    """One operator name in the greedy order: what recomputing it frees in one block, and costs."""

    name: str
    bytes_per_block: int
    seconds_per_block: float

    @property
    def bytes_per_second(self) -> float:
        return self.bytes_per_block / self.seconds_per_block if self.seconds_per_block > 0 else float("inf")


@dataclass(frozen=True)
class SacOrder:
    """torch's SAC greedy order for one block, by operator name, and how many blocks the model has. Unpacks
    as `ops, n_blocks`."""

    ops: list[OpChoice]
    n_blocks: int

    def __iter__(self) -> Iterator[Any]:
        return iter((self.ops, self.n_blocks))

    def table(self):
        """One row per operator, in the order: what recomputing it frees and costs in one block."""
        import pandas as pd

        from perflab.core.readout import nbytes, num, seconds

        rows = [{"operator": o.name, "frees per block": nbytes(o.bytes_per_block),
                 "recompute per block": seconds(o.seconds_per_block),
                 "MB freed per ms of recompute": "∞" if o.seconds_per_block <= 0 else num(o.bytes_per_second / 1e9)}
                for o in self.ops]
        return pd.DataFrame(rows).set_index("operator")


def greedy_order(make_target: Callable[[], Any], layout: Layout, c: Cluster) -> SacOrder:
    """The operator names of one block in torch's SAC greedy order (bytes freed per second of recompute,
    most first) with their memory and time per block, and the number of blocks: from one forward of the
    unsharded model cut to one block, under `SACEstimator`. Per-rank bytes and seconds under tensor
    parallelism are the block's divided by `layout.tp`."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.sac_estimator import SACEstimator

    from perflab.audit.target import default_loss
    from perflab.core.errors import InputError
    from perflab.plan.kernels import GpuKernels
    from perflab.plan.step import training_config

    with torch.device("meta"):
        target = make_target()
    found = find_blocks(target.model)
    if not found:
        raise InputError("--ac auto needs repeated blocks to recompute (a ModuleList of layers): this model has none")
    name, _ = found
    training_config(target.model)
    n_blocks = cut_blocks(target.model, 1)  # one block is all the estimator reads
    batch = _first_batch(target)
    loss_fn = target.loss_fn or default_loss
    one = Layout(gpus=1, dtype=layout.dtype)
    rec = _Recorder(c, one)
    # FSDP2's mixed precision computes with bf16 parameters (MixedPrecisionPolicy(param_dtype=bfloat16)), no
    # autocast: a mixture of experts' grouped GEMM takes bf16 only and autocast does not cast it (pytorch#174763)
    bf16_params = layout.dtype == "bf16" and layout.fsdp
    with fake_group(1), FakeTensorMode(allow_non_fake_inputs=True):
        target.model.to_empty(device="cpu")
        if bf16_params:
            target.model.to(torch.bfloat16)
        sac = SACEstimator()
        sac._estimate_runtime = rec  # the roofline of the target GPU
        fb = _fake_batch(batch)
        autocast = layout.dtype == "bf16" and not bf16_params
        with sac, contextlib.redirect_stdout(io.StringIO()), GpuKernels():
            with torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
                loss_fn(target.model, fb)
    meta = sac.sac_mod_greedy_order_meta.get(f"{type(target.model).__name__}.{name}.0") or \
        next((v for k, v in sac.sac_mod_greedy_order_meta.items() if k.endswith(f"{name}.0")), None)
    if meta is None:
        raise InputError("torch's SAC estimator saw no operator in the model's first block")
    order: dict[str, list[float]] = {}
    for m in meta.msps_meta:
        for fn in sorted(m.func_names):
            op = canonical(str(fn).split(".")[-1] if "." in str(fn) else str(fn))
            mem, secs = order.setdefault(op, [0.0, 0.0])
            share = len(m.func_names)
            order[op] = [mem + m.memory / share, secs + m.runtime / 1e3 / share]
    t = layout.tp
    ops = [OpChoice(k, int(v[0] / t), v[1] / t) for k, v in order.items() if v[0] > 0]
    return SacOrder(sorted(ops, key=lambda o: o.bytes_per_second, reverse=True), n_blocks)


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


def need_for_room(order: list[OpChoice], room_bytes: float, n_blocks: int) -> float:
    """The bytes a policy must free so that what it saves, in every block, fits `room_bytes` (the budget
    less full recompute's peak): every operator's output, less the room."""
    return sum(o.bytes_per_block for o in order) * n_blocks - max(room_bytes, 0.0)
