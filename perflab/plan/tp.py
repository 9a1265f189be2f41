"""Tensor parallelism for a planned step: Megatron's column/row pairs, with or without sequence and loss
parallelism, applied with torch's `parallelize_module` on the plan's fake process group.

* **Tensor parallelism alone** (`sp=False`): the projections are split over the `t` ranks of the
  group (q, k, v and the MLP's up/gate by columns, the attention output and the MLP's down projection
  by rows), and each block's output is all-reduced. Every rank keeps the whole residual stream, the
  norms' inputs and outputs, and computes the whole output layer and its fp32 loss: activations
  sbh(10 + 24/t + 5as/(ht)) per layer (Korthikanti et al., arXiv:2205.05198, §4.2.2).
* **Sequence and loss parallelism** (`sp=True`), as torchtitan's tensor-parallel plan applies them
  (torchtitan/models/llama3/infra/parallelize.py, `apply_tp`): the residual stream, the norms and the
  dropout are split by sequence over the group (`SequenceParallel`), gathered before each
  column-parallel pair and reduce-scattered after each row-parallel one (an all-gather and a
  reduce-scatter where TP alone all-reduces); the output layer is split by vocabulary and the
  cross-entropy is computed on the shards (`loss_parallel`), so no rank holds the whole fp32 logits.
  For perflab's own Transformer the blocks run sequence-parallel and the output layer (tied to the
  embedding) stays replicated: no loss parallelism.

The models planned: perflab's Transformer (lesson 12's plan, `perflab.shard.worker.tp_plan`), and a
Hugging Face model whose config carries `base_model_tp_plan` ('colwise' / 'rowwise' entries: Llama,
Mistral, Qwen2, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from perflab.core.errors import InputError

Plan = list[tuple[torch.nn.Module, Any]]  # (module, a ParallelStyle or a {name: ParallelStyle} plan)


def tp_plan(model: torch.nn.Module, tp: int, sp: bool = False) -> tuple[Plan, Callable[[Any], None] | None, bool]:
    """(module → plan pairs, a function to call after parallelising, whether the loss runs loss-parallel)."""
    cfg = getattr(model, "cfg", None)
    if cfg is not None and hasattr(cfg, "glu") and hasattr(model, "blocks"):
        return _perflab_plan(model, tp, sp)
    return _hf_plan(model, tp, sp)


def _perflab_plan(model: torch.nn.Module, tp: int, sp: bool):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        PrepareModuleInput,
        PrepareModuleOutput,
        RowwiseParallel,
        SequenceParallel,
    )

    from perflab.shard.formulas import check_tp
    from perflab.shard.worker import tp_plan as lesson12_plan

    cfg: Any = model.cfg
    check_tp(cfg, tp)
    local = cfg.with_(heads=cfg.heads // tp, kv_heads=cfg.n_kv // tp, head_dim=cfg.d_head)
    blocks = model.blocks
    if not isinstance(blocks, torch.nn.ModuleList):
        raise InputError("perflab's Transformer without a ModuleList of blocks cannot be tensor-parallelised")
    if sp and cfg.seq_len % tp:
        raise InputError(f"--sp splits the sequence over --tp {tp} ranks: the sequence length must be a multiple")
    plans = []
    for i, blk in enumerate(blocks):
        plan: dict[str, Any] = dict(lesson12_plan(cfg))
        if sp:
            plan.update({"norm1": SequenceParallel(), "norm2": SequenceParallel(),
                         "attn": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
                         "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                         "attn.o": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
                         "mlp.down": RowwiseParallel(output_layouts=Shard(1), use_local_output=False)})
            if i == 0:  # the residual stream enters the blocks split by sequence ...
                plans.append((blk, PrepareModuleInput(input_layouts=(Replicate(), None),
                                                      desired_input_layouts=(Shard(1), None), use_local_output=False)))
            if i == len(blocks) - 1:  # ... and leaves them whole, for the replicated output layer
                plans.append((blk, PrepareModuleOutput(output_layouts=Shard(1), desired_output_layouts=Replicate())))
        plans.append((blk, plan))

    def after(_model) -> None:
        for blk in blocks:
            blk.attn.cfg = local  # pyright: ignore[reportAttributeAccessIssue]  # each rank computes heads/t of the heads

    return plans, after, False


def _hf_plan(model: torch.nn.Module, tp: int, sp: bool):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    hf = getattr(model, "config", None)
    raw = getattr(hf, "base_model_tp_plan", None) or {}
    if not raw:
        raise InputError("--tp needs a model with a tensor-parallel plan: perflab's Transformer, or a Hugging Face "
                         "model whose config has base_model_tp_plan (llama, mistral, qwen2, ...)")
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    bad = sorted({v for v in raw.values() if v not in styles})
    if bad:
        raise InputError(f"the model's tensor-parallel plan uses {', '.join(bad)}: perflab plan applies colwise and "
                         "rowwise layers only")
    for key in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(hf, key, None)
        if heads and heads % tp:
            raise InputError(f"--tp {tp} does not divide the model's {key}={heads}")
    base = getattr(model, getattr(model, "base_model_prefix", "model"), model)
    if not sp:
        return [(base, {k: styles[v]() for k, v in raw.items()})], None, False
    return _hf_sequence_parallel(model, base, raw)


def _hf_sequence_parallel(model: torch.nn.Module, base: torch.nn.Module, raw: dict[str, str]):
    """torchtitan's plan (module docstring) on a Hugging Face decoder: embeddings split by vocabulary with a
    sequence-split output, norms sequence-parallel, each attention's and MLP's input gathered, each
    row-parallel output reduce-scattered by sequence, the output layer split by vocabulary (loss parallel)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    from perflab.plan.target import find_blocks

    found = find_blocks(base)
    embed = getattr(base, "embed_tokens", None)
    head = getattr(model, "lm_head", None)
    if found is None or embed is None or head is None or not hasattr(base, "norm"):
        raise InputError("--sp needs a decoder with embed_tokens, layers, norm and lm_head (llama, mistral, qwen2, ...)")
    plan: dict[str, Any] = {}
    for key, style in raw.items():
        plan[key] = ColwiseParallel() if style == "colwise" else RowwiseParallel(output_layouts=Shard(1),
                                                                                 use_local_output=False)
    plan["embed_tokens"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False)
    plan["norm"] = SequenceParallel()
    name, blocks = found
    gathered = {k.split(".")[2] for k in raw if k.count(".") >= 3}  # the modules whose inputs the pairs read
    for i, blk in enumerate(blocks):
        for child, mod in blk.named_children():
            if type(mod).__name__.endswith(("RMSNorm", "LayerNorm", "Norm")):
                plan[f"{name}.{i}.{child}"] = SequenceParallel()
            elif child in gathered:
                mod.register_forward_pre_hook(_gather_hidden, with_kwargs=True)
    top = {"lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)}
    return [(base, plan), (model, top)], None, True


def _gather_hidden(_module, args, kwargs):
    """The hidden states a column-parallel pair reads, gathered whole from their sequence shards."""
    def whole(x):
        from torch.distributed.tensor import DTensor, Replicate

        if isinstance(x, DTensor):
            return x.redistribute(placements=[Replicate()]).to_local()
        return x

    if args:
        args = (whole(args[0]), *args[1:])
    if "hidden_states" in kwargs:
        kwargs = dict(kwargs, hidden_states=whole(kwargs["hidden_states"]))
    return args, kwargs
