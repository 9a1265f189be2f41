"""Activation checkpointing with and without compile: none, full, selective.

full: every block's activations are dropped after the forward pass and the block is recomputed
in the backward pass (one extra forward: HFU counts it, MFU does not). selective: torch's
selective checkpoint policy keeps the outputs of the matmuls (expensive to recompute) and
recomputes only the cheap elementwise ops and norms. MFU/HFU come from `perflab.flops`.
"""

from __future__ import annotations

import functools

import torch
import torch.nn as nn

from perflab.core.errors import InputError

KINDS = ("none", "full", "selective")

_SAVE = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
         torch.ops.aten._scaled_dot_product_flash_attention.default,
         torch.ops.aten._scaled_dot_product_efficient_attention.default,
         torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}


def save_matmuls_policy(ctx, op, *args, **kwargs):
    """Selective policy: keep matmul and attention outputs, recompute everything else."""
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op in _SAVE else CheckpointPolicy.PREFER_RECOMPUTE


class Checkpointed(nn.Module):
    """Wraps a block: its forward runs under torch.utils.checkpoint (full or selective)."""

    def __init__(self, block: nn.Module, selective: bool):
        super().__init__()
        self.block = block
        self.selective = selective

    def forward(self, *args):
        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        if not torch.is_grad_enabled():
            return self.block(*args)
        kw = {}
        if self.selective:
            kw["context_fn"] = functools.partial(create_selective_checkpoint_contexts, save_matmuls_policy)
        return checkpoint(self.block, *args, use_reentrant=False, **kw)


def apply(model: nn.Module, kind: str) -> nn.Module:
    """Wrap each of `model.blocks` for `kind` ('none', 'full', 'selective'); returns the model."""
    if kind not in KINDS:
        raise InputError(f"unknown checkpointing {kind!r}: use one of {', '.join(KINDS)}")
    if kind != "none":
        model.blocks = nn.ModuleList(Checkpointed(b, kind == "selective") for b in model.blocks)
    return model
