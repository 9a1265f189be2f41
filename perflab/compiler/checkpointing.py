"""Activation checkpointing with and without compile: none, full, selective.

full: every block's activations are dropped after the forward pass and the block is recomputed
in the backward pass (one extra forward: HFU counts it, MFU does not). selective: torch's
selective checkpoint policy keeps the outputs of the matmuls (expensive to recompute) and
recomputes only the cheap elementwise ops and norms. MFU/HFU come from `perflab.flops.mfu.utilization`
against the bases of `perflab.flops.mfu.bases_for`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn as nn

from perflab.core.errors import InputError
from perflab.core.jsonable import package_json
from perflab.core.quietness import UNKNOWN, Quietness

if TYPE_CHECKING:
    from perflab.flops.mfu import Basis

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
        blocks = getattr(model, "blocks", None)
        if not isinstance(blocks, nn.ModuleList):
            raise InputError(f"checkpointing wraps a model's `blocks` (an nn.ModuleList); {type(model).__name__} has none")
        model.blocks = nn.ModuleList(Checkpointed(b, kind == "selective") for b in blocks)
    return model


@contextlib.contextmanager
def quiet_policy_warning():
    """torch warns once per process that a selective policy under compile must avoid in-place ops
    (this policy only saves or recomputes; it changes nothing in place): keep it out of the output."""
    log = logging.getLogger("torch._higher_order_ops.wrap")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def hardware_flops(cfg, batch: int, seq: int, kind: str) -> tuple[int, int]:
    """(model FLOPs, hardware FLOPs) of one training step with checkpointing `kind`, from
    `perflab.flops.transformer.exact_flops`. full: one more forward of every block (less the last
    product, see exact_flops' early stop); selective: the matmuls are saved, so no matmul FLOP is
    recomputed and hardware FLOPs equal those of 'none' (the recomputed elementwise ops are not
    matmul-class FLOPs)."""
    from perflab.flops.transformer import exact_flops

    if kind not in KINDS:
        raise InputError(f"unknown checkpointing {kind!r}: use one of {', '.join(KINDS)}")
    ex = exact_flops(cfg, batch, seq, checkpointing=kind == "full")
    return ex.model, ex.hardware


@dataclass(frozen=True)
class CheckpointRun:
    """One checkpointing kind, eager or compiled: its step, its peak memory and its utilization."""

    checkpointing: str  # 'none', 'full' or 'selective'
    compiled: bool
    step_s: float  # median seconds of a training step (forward, backward, AdamW)
    peak_bytes: int  # the first forward + backward's peak above its start
    model_flops: int  # per step
    hardware_flops: int  # per step, the recomputation of eager full checkpointing included
    mfu: float | None  # against the basis of the dtype that ran; None without one, or when suspect
    hfu: float | None
    mfu_suspect: str | None = None  # why there is no figure although there is a basis (above 100 %)
    quietness: Quietness = UNKNOWN  # what else used the device while the steps were timed


def measure(cfg, batches, *, steps: int = 3, device=None, kinds=KINDS, backend: str = "inductor",
            autocast: torch.dtype | None = None, bases: Mapping[str, Basis] | None = None) -> list[CheckpointRun]:
    """Each checkpointing kind, eager and compiled: median step seconds (forward, backward, AdamW: the
    course's step, `perflab.workload.train.StepRunner`) with the machine's quietness meanwhile, the peak memory of the first forward +
    backward above its start (where checkpointing acts; the optimizer's update is left out: its
    temporaries are the same in every row), and MFU/HFU against `bases` (one per dtype,
    `perflab.flops.mfu.bases_for`; the step's dtype is `autocast`'s, else fp32) by
    `perflab.flops.mfu.utilization` (None: not computed). One row per (kind, compiled).

    Peak memory: CUDA: the caching allocator's `max_memory_allocated`; CPU: torch's allocator
    events in the profiler, exact for tensor storage (`perflab.memory.probe.allocated_during`).
    HFU counts the recomputation of eager checkpointing; a compiled graph's partitioner decides
    its own recomputation, so compiled HFU uses the same count."""
    from perflab.core.dtypes import parse_dtype
    from perflab.core.quietness import watch
    from perflab.core.validate import positive_int
    from perflab.flops.mfu import utilization
    from perflab.memory.probe import allocated_during
    from perflab.workload.models import build_model
    from perflab.workload.train import StepRunner

    steps = positive_int("steps", steps)
    device = torch.device(device) if device is not None else batches[0][0].device
    batch, seq = batches[0][0].shape
    dtype = parse_dtype(autocast if autocast is not None else torch.float32).name

    rows = []
    with quiet_policy_warning():
        for kind in kinds:
            mflops, hflops = hardware_flops(cfg, batch, seq, kind)
            for compiled in (False, True):
                torch._dynamo.reset()
                runner = StepRunner(apply(build_model(cfg, device=device), kind), device=device, autocast_dtype=autocast,
                                    compile_kw={"backend": backend} if compiled else None)
                # the first forward + backward (it compiles, or warms up eager) is the one whose
                # memory is measured; it is not timed, the profiler would slow it
                peak = allocated_during(lambda r=runner: r.accumulate([batches[0]]), device)["peak_bytes"]
                runner.update()
                with watch(device) as w:
                    s = statistics.median(runner.step([batches[i % len(batches)]]).step_s for i in range(steps))
                u = utilization(s, {dtype: mflops}, bases, {dtype: hflops}) if bases else None
                rows.append(CheckpointRun(kind, compiled, s, int(peak), mflops, hflops, u.mfu if u else None,
                                          u.hfu if u else None, u.suspect if u else None, w.result))
                del runner
    torch._dynamo.reset()
    return rows


def frame(rows: list[CheckpointRun]):
    """The rows of `measure` as a table a person reads (ms, MiB, %), each with the machine's quietness
    while its steps were timed."""
    import pandas as pd

    from perflab.core.readout import num, percent

    return pd.DataFrame([{
        "checkpointing": r.checkpointing, "run": "compiled" if r.compiled else "eager",
        "step (ms)": num(r.step_s * 1e3),
        "peak memory, fwd+bwd (MiB)": num(r.peak_bytes / 2**20),
        "model GFLOP/step": num(r.model_flops / 1e9), "hardware GFLOP/step": num(r.hardware_flops / 1e9),
        "MFU": percent(r.mfu) if r.mfu is not None else "n/a",
        "HFU": percent(r.hfu) if r.hfu is not None else "n/a", "machine": r.quietness.line()} for r in rows])


def published():
    """The published compile MFU figures (`data/published_compile_mfu.json`), with their source."""
    return package_json("perflab.compiler", "published_compile_mfu.json")


def beside_published(rows: list[CheckpointRun], *, model: str, device_name: str, peak_label: str):
    """The published MFU rows and this machine's measured rows in one table, each saying where it
    comes from (published figures are never this machine's)."""
    import pandas as pd

    from perflab.core.readout import percent

    pub = published()
    url = re.search(r"https?://(\S+?)/?(?:[,;)\s]|$)", pub["source"])
    label = f"published: {url.group(1)}" if url else "published"
    out = [{"source": label, "model": r["model"], "hardware": f"{r['gpus']} × {r['gpu']}",
            "checkpointing": "selective" if r.get("selective_checkpointing") else "none",
            "compiled": r["compile"], "MFU": percent(r["mfu"]), "peak": "the source's GPU peak"} for r in pub["rows"]]
    out += [{"source": "measured here", "model": model, "hardware": device_name, "checkpointing": r.checkpointing,
             "compiled": r.compiled, "MFU": percent(r.mfu) if r.mfu is not None else "n/a (peak unknown)",
             "peak": peak_label} for r in rows]
    return pd.DataFrame(out)


def lowest_memory(rows: list[CheckpointRun]) -> str:
    """The checkpointing kind whose eager run had the lowest peak memory."""
    return min((r for r in rows if not r.compiled), key=lambda r: r.peak_bytes).checkpointing


@dataclass
class CheckpointStudy:
    """Lesson 10's section 4: the rows of `measure` for one model, with what they were measured on."""

    rows: list[CheckpointRun]
    model: str  # the model as the lesson names it: "tiny-llama (2 layers)"
    batch: int
    seq: int
    dtype: str  # what ran: "bf16" (autocast, a GPU) or "fp32"
    backend: str  # the compiled rows' backend: "inductor" or "eager"
    basis_label: str  # what MFU divides by (`perflab.flops.mfu.Basis.label`)

    def describe(self) -> str:
        how = "the inductor" if self.backend == "inductor" else "the eager backend (dynamo only; inductor=True for kernels)"
        return (f"{self.model}, batch {self.batch} × seq {self.seq}, {self.dtype}, compiled with {how}; "
                f"MFU against the {self.basis_label}")

    def table(self):
        return frame(self.rows)

    def lowest_memory(self) -> str:
        return lowest_memory(self.rows)

    def beside_published(self, device_name: str):
        """`beside_published` of these rows."""
        return beside_published(self.rows, model=self.model, device_name=device_name, peak_label=self.basis_label)


def study(cfg, size, device, *, backend: str = "eager") -> CheckpointStudy:
    """Section 4 of lesson 10 at `size` (`perflab.compiler.sizes.Sizes`: its `ck_*` fields): none, full and
    selective checkpointing of `cfg` (its first `size.ck_layers` blocks, all when None), eager and compiled
    with `backend`, in bf16 autocast on a GPU and fp32 elsewhere, MFU against that dtype's basis
    (`perflab.flops.mfu.bases_for`: the spec peak, or the ceiling measured here)."""
    import dataclasses

    from perflab.flops.mfu import bases_for
    from perflab.workload.train import make_batches

    device = torch.device(device)
    on_gpu = device.type == "cuda"
    ck_cfg = cfg if size.ck_layers is None else dataclasses.replace(cfg, layers=size.ck_layers)
    batches = make_batches(ck_cfg, size.ck_batch, size.ck_seq, n=2, device=device)
    dtype = "bf16" if on_gpu else "fp32"
    bases = bases_for(device, [dtype])
    rows = measure(ck_cfg, batches, steps=size.ck_steps, device=device, backend=backend,
                   autocast=torch.bfloat16 if on_gpu else None, bases=bases)
    name = f"{ck_cfg.name} ({ck_cfg.layers} layer{'s' if ck_cfg.layers > 1 else ''})"
    return CheckpointStudy(rows, name, size.ck_batch, size.ck_seq, dtype, backend, bases[dtype].label())
