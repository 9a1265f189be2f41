"""Each rung of lesson 11's ladder as a change to the step's configuration, or why it does not apply here.

    >>> ch = apply_rung("batch", sc, tp, device, rows)
    >>> ch.config, ch.applicable, ch.note        # the new StepConfig, and the rung's reason in words

The memory rungs (`batch`, `checkpoint`) choose their micro-batch with lesson 03's estimator
(`perflab.memory.estimate.step_phases`) against the preset's memory budget (on a GPU without one,
90 % of its free memory); `adamw` takes the fused AdamW where torch has one for the device, else foreach;
`numa` binds to the GPU's node, or node 0, where there are two nodes or more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from perflab.core.dtypes import native_bf16
from perflab.core.errors import InputError
from perflab.tune.config import PAD_MULTIPLE, StepConfig, padded_vocab
from perflab.tune.ladder import TunePreset
from perflab.workload.optim import fused_adamw_available


def predicted_peak(tp: TunePreset, sc: StepConfig, micro: int, checkpointing: bool, device: torch.device) -> int:
    """Lesson 03's estimator: the step's predicted peak bytes at this micro-batch."""
    from perflab.memory.estimate import step_phases

    cfg = tp.cfg.with_(vocab=padded_vocab(tp.cfg.vocab)) if sc.pad_vocab else tp.cfg
    opt = "adamw-fused" if sc.optimizer != "loop" else "adamw"
    dev = "cuda" if device.type == "cuda" else "cpu"
    phases = step_phases(cfg, micro, tp.seq, dtype="fp32", optimizer=opt,
                         recompute="full" if checkpointing else "none", device=dev)
    return max(p.peak_bytes for p in phases)


def memory_budget(tp: TunePreset, device: torch.device) -> int:
    if tp.memory_budget_bytes is not None:
        return tp.memory_budget_bytes
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return int(min(free, total) * 0.9)
    raise InputError(f"preset {tp.name!r} has no memory budget for a {device.type} device")


def largest_fitting(tp: TunePreset, sc: StepConfig, device: torch.device, checkpointing: bool) -> tuple[int, int]:
    """(micro-batch, its predicted peak): the largest divisor of the global batch, no smaller than the
    current micro-batch, whose predicted peak fits the budget (the current one if none larger fits)."""
    budget = memory_budget(tp, device)
    G = tp.global_batch
    for mb in sorted((d for d in range(1, G + 1) if G % d == 0 and d >= sc.micro_batch), reverse=True):
        p = predicted_peak(tp, sc, mb, checkpointing, device)
        if p <= budget:
            return mb, p
    return sc.micro_batch, predicted_peak(tp, sc, sc.micro_batch, checkpointing, device)


@dataclass
class Change:
    """A rung's configuration on top of the previous one, whether it applies here, and why, in words."""

    config: StepConfig
    applicable: bool
    note: str
    extra: dict[str, Any] = field(default_factory=dict)


def apply_rung(name: str, sc: StepConfig, tp: TunePreset, device: torch.device, history: Sequence[dict]) -> Change:
    """The configuration after rung `name` on top of `sc`, or why it does not apply here."""
    if name == "baseline":
        return Change(replace(StepConfig(), micro_batch=tp.micro_batch), True, "the reference")
    if name == "bf16":
        ok, why = native_bf16(device)
        return Change(replace(sc, dtype="bf16"), True, ("native bf16 here: " if ok else "no native bf16: ") + why,
                      {"native_bf16": ok})
    if name == "adamw":
        kind = "fused" if fused_adamw_available(device) else "foreach"
        return Change(replace(sc, optimizer=kind), True, f"AdamW with {kind}=True")
    if name == "vocab64":
        v, p = tp.cfg.vocab, padded_vocab(tp.cfg.vocab)
        if v == p:
            return Change(sc, False, f"the vocabulary ({v:,}) is already a multiple of {PAD_MULTIPLE}")
        return Change(replace(sc, pad_vocab=True), True, f"vocabulary {v:,} → {p:,} ({p - v} zero rows)")
    if name == "sdpa":
        return Change(replace(sc, sdpa=True), True, "F.scaled_dot_product_attention(is_causal=True)")
    if name == "compile":
        return Change(replace(sc, compiled=True), True, "torch.compile(model), inductor")
    if name == "batch":
        mb, pred = largest_fitting(tp, sc, device, checkpointing=sc.checkpointing)
        budget = memory_budget(tp, device)
        if mb == sc.micro_batch:
            return Change(sc, False, f"no larger micro-batch fits the budget of {_mib(budget)} "
                                     f"(micro-batch {mb}: predicted {_mib(pred)})", {"predicted_peak_bytes": pred})
        return Change(replace(sc, micro_batch=mb), True,
                      f"micro-batch {sc.micro_batch} → {mb} (accumulation {tp.global_batch // sc.micro_batch} → "
                      f"{tp.global_batch // mb}); predicted peak {_mib(pred)} of a {_mib(budget)} budget",
                      {"predicted_peak_bytes": pred, "budget_bytes": budget})
    if name == "checkpoint":
        if sc.micro_batch == tp.global_batch:
            return Change(sc, False, "memory does not need it: the whole global batch already fits in one micro-batch")
        plain, _ = largest_fitting(tp, sc, device, checkpointing=False)
        if plain > sc.micro_batch:
            return Change(sc, False, f"memory does not need it: micro-batch {plain} fits without checkpointing "
                                     "(the batch rung raises it)")
        mb, pred = largest_fitting(tp, sc, device, checkpointing=True)
        budget = memory_budget(tp, device)
        if mb <= sc.micro_batch:
            return Change(sc, False, f"even with checkpointing no larger micro-batch fits {_mib(budget)}",
                          {"predicted_peak_bytes": pred})
        return Change(replace(sc, micro_batch=mb, checkpointing=True), True,
                      f"memory capped the micro-batch at {sc.micro_batch}: with every block recomputed, {mb} fits "
                      f"(predicted {_mib(pred)} of {_mib(budget)})", {"predicted_peak_bytes": pred, "budget_bytes": budget})
    if name == "loader":
        from perflab.dataloading.loader import available_cores

        w = max(1, min(2, available_cores() - 1)) if available_cores() > 1 else 1
        pin = device.type == "cuda"
        return Change(replace(sc, workers=w, pin_memory=pin), True,
                      f"{w} DataLoader worker{'s' if w > 1 else ''}" + (", pinned memory + non_blocking copies" if pin
                                                                       else "; pinned memory has no effect without an accelerator"))
    if name == "numa":
        from perflab.numa.topology import read_topology

        topo = read_topology()
        if len(topo.nodes) < 2:
            return Change(sc, False, f"one NUMA node here ({len(topo.nodes)}): every core is already local to all "
                                     "memory, so there is nothing to bind")
        node = topo.gpus[0].numa_node if (device.type == "cuda" and topo.gpus and topo.gpus[0].numa_node is not None) else 0
        return Change(replace(sc, numa_node=node), True, f"bound to NUMA node {node}'s CPUs")
    raise InputError(f"unknown rung {name!r}")


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"
