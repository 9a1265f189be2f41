"""A configuration of lesson 11's step: everything the ladder changes, and what it builds from it.

    >>> sc = StepConfig(dtype="bf16", sdpa=True, micro_batch=4)
    >>> model = build(cfg, sc, device)          # same initial weights for every configuration
    >>> runner = step_runner(model, sc, ...)    # the workload's one training step, set up for `sc`

The baseline is `StepConfig()`: fp32, AdamW as a Python loop, the vocabulary unpadded, attention
written out (softmax(QKᵀ/√d)·V), eager, micro-batch 2, no checkpointing, the data read in the
training loop, no CPU binding. A rung of `perflab.tune.ladder` changes one field.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON
from perflab.workload.data import SlowTokens
from perflab.workload.models import Attention, ModelConfig, build_model
from perflab.workload.optim import make_optimizer
from perflab.workload.train import StepRunner

PAD_MULTIPLE = 64
LR = 1e-3  # the ladder's learning rate: parity compares losses after a few steps, which a larger rate separates more


@dataclass(frozen=True)
class StepConfig:
    """Everything the ladder changes about the step (the baseline is the default)."""

    dtype: str = "fp32"  # 'fp32' or 'bf16' (autocast)
    optimizer: str = "loop"  # 'loop' (for-loop AdamW), 'foreach' or 'fused': make_optimizer's adamw-<optimizer>
    pad_vocab: bool = False
    sdpa: bool = False  # False: attention written out (softmax(QKᵀ/√d)·V)
    compiled: bool = False
    micro_batch: int = 2
    checkpointing: bool = False
    workers: int = 0
    pin_memory: bool = False
    numa_node: int | None = None  # bound to this node's CPUs

    def as_dict(self) -> JSON:
        """The configuration as saved in a rung's row (the results file's key)."""
        return asdict(self)


class WrittenOutAttention(Attention):
    """perflab's attention with the product written out, as a first script does: the s×s scores
    are stored (and kept for backward) instead of going through one fused SDPA kernel."""

    def forward(self, x, rope=None):
        b, s, _ = x.shape
        c = self.cfg
        q = self.q(x).view(b, s, c.heads, c.d_head).transpose(1, 2)
        k = self.k(x).view(b, s, c.n_kv, c.d_head).transpose(1, 2)
        v = self.v(x).view(b, s, c.n_kv, c.d_head).transpose(1, 2)
        if c.n_kv != c.heads:
            k = k.repeat_interleave(c.heads // c.n_kv, dim=1)
            v = v.repeat_interleave(c.heads // c.n_kv, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(c.d_head)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        y = F.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
        return self.o(y.transpose(1, 2).reshape(b, s, c.heads * c.d_head))


def padded_vocab(vocab: int, multiple: int = PAD_MULTIPLE) -> int:
    return -(-vocab // multiple) * multiple


def build(cfg: ModelConfig, sc: StepConfig, device: torch.device) -> torch.nn.Module:
    """The model of configuration `sc`: same initial weights for every configuration (torch.manual_seed(0))."""
    if cfg.positions != "learned" or not cfg.tied:
        raise InputError("the tuning ladder runs GPT-shaped models (learned positions, tied embeddings)")
    model = build_model(cfg, device=device, seed=0)
    if not sc.sdpa:
        for blk in model.blocks:
            attn: Any = blk.attn
            attn.__class__ = WrittenOutAttention
    if sc.pad_vocab and padded_vocab(cfg.vocab) != cfg.vocab:
        old = model.embed.weight.data
        new = torch.zeros(padded_vocab(cfg.vocab), cfg.hidden, device=old.device, dtype=old.dtype)
        new[: cfg.vocab] = old  # zero rows: their logits are cut off before the loss, so nothing changes
        model.embed = torch.nn.Embedding.from_pretrained(new, freeze=False)
    model.checkpointing = sc.checkpointing
    return model


def optimizer_for(model: torch.nn.Module, sc: StepConfig) -> torch.optim.Optimizer:
    """The configuration's AdamW (`perflab.workload.optim.make_optimizer`'s adamw-loop, -foreach or -fused)."""
    if sc.optimizer not in ("loop", "foreach", "fused"):
        raise InputError(f"unknown optimizer kind {sc.optimizer!r}: use loop, foreach or fused")
    return make_optimizer(model.parameters(), f"adamw-{sc.optimizer}", lr=LR)


def step_runner(model: torch.nn.Module, opt: torch.optim.Optimizer, sc: StepConfig, cfg: ModelConfig, grad_accum: int,
                device: torch.device) -> StepRunner:
    """The workload's training step for configuration `sc`: compiled or eager, bf16 autocast or fp32,
    `grad_accum` micro-batches, a padded vocabulary's zero columns cut off before the loss."""
    V = cfg.vocab

    def cut(logits: torch.Tensor) -> torch.Tensor:
        return logits[..., :V]

    return StepRunner(model, opt, grad_accum=grad_accum, autocast_dtype=torch.bfloat16 if sc.dtype == "bf16" else None,
                      device=device, compile_kw={} if sc.compiled else None, output=cut if sc.pad_vocab else None)


def make_loader(ds: SlowTokens, sc: StepConfig, device: torch.device):
    kw: dict[str, Any] = {}
    if sc.workers > 0:
        kw = {"prefetch_factor": 4, "persistent_workers": False}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        return torch.utils.data.DataLoader(ds, batch_size=sc.micro_batch, shuffle=False, num_workers=sc.workers,
                                           pin_memory=sc.pin_memory and device.type == "cuda", **kw)


@contextlib.contextmanager
def bound_to(cpus: Sequence[int] | None):
    """This process (and the DataLoader workers it starts) on `cpus` while inside; restored after."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield
        return
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)


def numa_cpus(sc: StepConfig) -> list[int] | None:
    """The CPUs of the configuration's NUMA node (None: not bound)."""
    if sc.numa_node is None:
        return None
    from perflab.numa.topology import read_topology

    return next((n.cpus for n in read_topology().nodes if n.id == sc.numa_node), None)
