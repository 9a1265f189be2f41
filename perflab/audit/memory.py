"""The step's memory by part (weights, gradients, optimizer state, activations, peak), beside lesson 03's
estimate (`perflab.memory.estimate`) where the model's shape is readable from its config.

On a GPU the peak is `torch.cuda.max_memory_allocated` over one step; on a CPU it is the weights and
optimizer states held before the step plus the highest rise the allocator saw during it (profiler
memory events, `perflab.memory.probe.allocated_during`). Activations are the storages autograd saved
for the backward in one forward (`perflab.memory.probe.saved_tensors`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from perflab.audit.report import Memory
from perflab.audit.work import first_int


def measure_memory(model: torch.nn.Module, opt: torch.optim.Optimizer, step: Callable[[Any], Any],
                   loss_fn: Callable[[torch.nn.Module, Any], Any], batch: Any, dev: torch.device, cfg: Any,
                   tokens: int | None, samples: int | None, params_total: int) -> Memory:
    """Bytes per part of one `step(batch)` of `model` on `dev`, and lesson 03's estimate for its config
    `cfg` (None: no estimate), with notes saying how each figure was read."""
    from perflab.memory.probe import allocated_during, saved_tensors

    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    weights += sum(b.numel() * b.element_size() for b in model.buffers())
    states = sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values()
                 if isinstance(v, torch.Tensor))
    opt.zero_grad(set_to_none=True)
    _, saved = saved_tensors(lambda: loss_fn(model, batch), exclude=list(model.parameters()))
    _ = None
    notes = []
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        base = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        step(batch)
        torch.cuda.synchronize(dev)
        peak = int(torch.cuda.max_memory_allocated(dev))
        rise = peak - base
        notes.append("peak: torch.cuda.max_memory_allocated over one step")
    else:
        rise = allocated_during(lambda: step(batch), dev)["peak_bytes"]
        peak = int(weights + states + rise)
        notes.append("peak: weights + optimizer states held before the step + the highest rise the CPU allocator "
                     "saw during it (profiler memory events)")
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    notes.append("activations: the storages autograd saved for the backward in one forward (checkpointed regions "
                 "save through their own hooks and are not seen)")
    est = estimate(cfg, params_total, tokens, samples, opt)
    if est is not None:
        rest = peak - est
        notes.append(f"lesson 03's estimate (fp32 weights, gradients and AdamW states; Korthikanti et al. 2022's "
                     f"activations) is {est / 2**20:.3g} MiB; the remainder {rest / 2**20:+.3g} MiB is temporaries "
                     "(logits and their gradient, attention workspaces), the allocator's rounding and whatever the "
                     "formula counts that this model does not store (dropout masks without dropout, s×s scores under "
                     "SDPA)")
    return Memory(int(weights), int(grads), int(states), int(saved.total_bytes), int(peak),
                  None if est is None else int(est), notes)


def estimate(cfg: Any, params: int, tokens: int | None, samples: int | None, opt: torch.optim.Optimizer) -> float | None:
    """Lesson 03's estimate in bytes for a transformer whose shape the config gives (fp32, AdamW); None
    otherwise."""
    if cfg is None or not tokens or not samples or not isinstance(opt, (torch.optim.Adam, torch.optim.AdamW)):
        return None
    from perflab.memory.estimate import estimate as lesson03

    layers = first_int(cfg, ("num_hidden_layers", "n_layer", "num_layers"))
    hidden = first_int(cfg, ("hidden_size", "n_embd", "d_model"))
    heads = first_int(cfg, ("num_attention_heads", "n_head"))
    vocab = first_int(cfg, ("vocab_size",))
    if not (layers and hidden and heads):
        return None
    seq = tokens // samples
    try:
        est = lesson03(params=params, precision="fp32", optimizer="adamw", batch=samples, seq=seq, layers=layers,
                       hidden=hidden, heads=heads, vocab=vocab)
    except Exception:  # noqa: BLE001 - a shape the formula cannot take: no estimate, said as null
        return None
    return float(est.total_bytes)
