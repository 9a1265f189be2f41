"""The ladder as data: each rung is one named change to a training step, with the lesson that explains it.

    >>> [r.name for r in RUNGS]
    ['baseline', 'bf16', 'adamw', 'vocab64', 'sdpa', 'compile', 'batch', 'checkpoint', 'loader', 'numa']
    >>> preset("cpu").cfg.name, preset("gpu").cfg.name      # a CPU size, full GPT-2 small
    >>> parse_rungs("sdpa,compile")                         # ('baseline', 'sdpa', 'compile')

Rungs apply cumulatively, in the order given, on top of every earlier rung that was adopted. Each
rung is timed *interleaved* with the configuration it changes (one step of each in turn, so drift of
the machine hits both alike), and its speed-up is the median of the per-pair ratios with a sign-test
interval (`perflab.tune.verdict`). A rung is *adopted* when it keeps loss parity and the whole
interval lies above 1.02 (2 % faster); *kept out* when the whole interval lies below it; and
*inconclusive* when the time budget ends first. Only adopted rungs are built on; the others are kept
in the table, measured and explained. A rung that breaks parity stops the ladder.

The baseline is the step a first training script writes: fp32, a for-loop AdamW, the vocabulary as
the tokenizer gives it, attention written out as softmax(QKᵀ/√d)·V, no compiler, a small micro-batch
(the global batch reached with gradient accumulation), data read in the training loop, and no CPU
binding. The global batch (sequences per optimizer step) never changes along the ladder: the batch
rungs change the micro-batch and gradient accumulation only, so every rung trains the same model on
the same data and its loss after N steps must match the baseline's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from perflab.core.errors import InputError
from perflab.workload.models import ModelConfig
from perflab.workload.models import preset as model_preset


@dataclass(frozen=True)
class Rung:
    name: str
    title: str
    changes: str  # what the rung changes in the step
    lesson: str  # the lesson that explains it ("02 MFU vs HFU")
    why: str  # why it can help (and when it does not)
    # the waterfall categories the rung can move; the others must stay within the measurement's noise
    touches: tuple[str, ...] = ("compute", "data_wait", "host_sync", "launch_overhead", "optimizer")


RUNGS: tuple[Rung, ...] = (
    Rung("baseline", "baseline fp32 eager", "nothing: fp32, for-loop AdamW, vocabulary as given, attention written out, "
         "eager, small micro-batch with gradient accumulation, data read in the loop, no binding",
         "02 MFU vs HFU", "the reference every rung is measured against: time, utilization, memory and loss"),
    Rung("bf16", "bf16 autocast", "matmuls and activations in bf16 under torch.autocast; weights and AdamW stay fp32",
         "00 setup (matmul TFLOP/s per dtype)",
         "half the bytes per activation and, where the hardware multiplies bf16 natively (Tensor Cores, AMX), "
         "several times the matmul rate; without native bf16 every product is converted to fp32 and back",
         touches=("compute", "launch_overhead", "host_sync")),
    Rung("adamw", "fused/foreach AdamW", "AdamW with fused=True where the device has it, else foreach=True",
         "09 profiling (launch overhead)",
         "the for-loop AdamW runs ~10 small ops per parameter tensor; foreach/fused run a few ops over all of them",
         touches=("optimizer", "launch_overhead")),
    Rung("vocab64", "vocabulary padded to a multiple of 64", "token embedding (and tied output layer) padded with zero rows to "
         "a multiple of 64; the padded logits are cut off before the loss", "04 tiles and waves (shapes GEMMs like)",
         "the logits GEMM is the largest in a small model; padding does not fill whole tiles (50,257 and 50,304 "
         "need as many 64-, 128- and 256-wide tiles, `perflab.tune.rungmath.vocab_padding`) but aligns every row: "
         "a bf16 row of 50,257 values is not a multiple of 16 bytes, so the logits GEMM and both of its backward "
         "GEMMs lose the aligned, vectorised Tensor Core paths (NVIDIA, Matrix Multiplication Background "
         "User's Guide, Tensor Core requirements)",
         touches=("compute", "launch_overhead")),
    Rung("sdpa", "SDPA / flash attention", "attention through F.scaled_dot_product_attention (flash or memory-efficient "
         "kernels) instead of softmax(QKᵀ)·V written out", "02 MFU vs HFU and 03 memory (the s×s scores)",
         "one fused kernel, and the s×s score matrix is never stored: less memory traffic and less memory",
         touches=("compute", "launch_overhead", "host_sync")),
    Rung("compile", "torch.compile", "the model compiled with torch.compile (inductor); optimizer unchanged",
         "10 torch.compile", "fuses the elementwise ops between the matmuls into few kernels; costs compile time once",
         touches=("compute", "launch_overhead", "host_sync")),
    Rung("batch", "largest micro-batch that fits", "the micro-batch raised to the largest divisor of the global batch whose "
         "predicted peak (lesson 03's estimator) fits the memory budget, then checked by measuring; fewer accumulation steps",
         "03 memory anatomy", "bigger matmuls run nearer the device's ceiling and per-step overheads are paid fewer times"),
    Rung("checkpoint", "activation checkpointing where memory needs it", "only if the memory budget capped the micro-batch: "
         "every block recomputed in the backward pass so a larger micro-batch fits", "03 memory and 10 torch.compile",
         "re-runs the forward of every block in the backward: about one more forward, at most a third more step "
         "FLOPs, less because the LM head is not recomputed (`perflab.tune.rungmath.checkpoint_cost`; HFU counts "
         "them, MFU does not); trades them for room and pays only where the larger micro-batch gains more than the "
         "recompute costs"),
    Rung("loader", "DataLoader workers + pinned memory", "batches read by DataLoader worker processes ahead of the step; "
         "pinned host memory and non_blocking copies on a GPU", "07 input pipeline",
         "the step stops waiting for storage: workers read while the device computes"),
    Rung("numa", "NUMA binding", "the process and its DataLoader workers bound to the cores of the accelerator's NUMA node",
         "08 NUMA", "local memory is faster than a remote node's; on one node every core is already local"),
)

RUNG_NAMES = tuple(r.name for r in RUNGS)
_BY_NAME = {r.name: r for r in RUNGS}


def table():
    """The ladder for a reader: each rung, what it changes, and the lesson that explains it."""
    import pandas as pd

    return pd.DataFrame([{"rung": r.name, "what it changes": r.changes, "lesson": r.lesson} for r in RUNGS])


def rung(name: str) -> Rung:
    key = str(name).strip().lower()
    if key not in _BY_NAME:
        raise InputError(f"unknown rung {name!r}: choose from {', '.join(RUNG_NAMES)}")
    return _BY_NAME[key]


def parse_rungs(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """Rung names in the order given ('a,b,c' or a list), the baseline first (added when missing).
    Unknown or repeated names: InputError naming them."""
    if text is None:
        return RUNG_NAMES
    items = [p.strip().lower() for x in ([text] if isinstance(text, str) else text) for p in str(x).split(",")]
    items = [i for i in items if i]
    if not items:
        raise InputError(f"--rungs is empty: name rungs from {', '.join(RUNG_NAMES)}")
    for i in items:
        rung(i)
    dup = sorted({i for i in items if items.count(i) > 1})
    if dup:
        raise InputError(f"rung {dup[0]!r} is named twice: name each rung once")
    if "baseline" in items and items[0] != "baseline":
        raise InputError("'baseline' must come first: every rung is measured against it")
    return tuple(items if items[0] == "baseline" else ["baseline", *items])


# ---------------------------------------------------------------- presets


@dataclass(frozen=True)
class TunePreset:
    """One step to make fast: the model, the global batch (sequences per optimizer step), the
    baseline micro-batch, the timed steps, the data's storage latency and the memory budget."""

    name: str
    cfg: ModelConfig
    global_batch: int
    micro_batch: int
    steps: int  # at least this many interleaved pairs per rung (the loss is compared after warmup + steps)
    warmup: int
    io_ms: float  # storage latency per sequence read (a wait, as lesson 07's dataset)
    memory_budget_bytes: int | None  # None: the device's memory (GPU)
    target_speedup: float  # what the lab asks the learner to reach on this preset
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # seconds of interleaved timing a rung may take before it is called inconclusive (compile and
    # warmup not counted); `steps` is the least number of pairs
    rung_budget_s: float = 4.0

    @property
    def seq(self) -> int:
        return self.cfg.seq_len


# A GPT-2-shaped model (learned positions, LayerNorm, GELU MLP of 4h, tied embeddings) at sizes where
# one step takes a fraction of a second on a laptop CPU. Its vocabulary is odd, as GPT-2's 50,257 is,
# so the padding rung has something to pad.
CPU_CFG = ModelConfig("gpt2-cpu", 2, 128, 4, None, 512, False, 4093, 64, True, True, "learned", "layernorm")
SMOKE_CFG = ModelConfig("gpt2-smoke", 1, 64, 2, None, 256, False, 509, 32, True, True, "learned", "layernorm")

PRESETS: dict[str, TunePreset] = {
    "gpu": TunePreset("gpu", model_preset("gpt2-small"), 32, 4, 5, 3, 1.0, None, 2.0,
                      "GPT-2 small (124M parameters, sequence 1024, vocabulary 50,257); the batch rung fills the GPU",
                      rung_budget_s=30.0),
    "cpu": TunePreset("cpu", CPU_CFG, 16, 2, 3, 1, 4.0, 40 * 2**20, 1.3,
                      "a GPT-2-shaped model at CPU size (2 layers, h 128, vocabulary 4,093, sequence 64): each rung "
                      "measured in seconds; the memory budget (40 MiB) caps the micro-batch below the global batch",
                      rung_budget_s=4.0),
    "smoke": TunePreset("smoke", SMOKE_CFG, 8, 2, 2, 1, 2.0, 3 * 2**20, 1.1,
                        "a one-layer GPT-2-shaped model for tests and smoke runs (seconds per ladder)",
                        rung_budget_s=2.0),
}


def preset(name: str) -> TunePreset:
    key = str(name).strip().lower()
    if key not in PRESETS:
        raise InputError(f"unknown preset {name!r}: use one of {', '.join(PRESETS)}")
    return PRESETS[key]


def default_preset(device_type: str) -> str:
    """'gpu' on a CUDA device, 'cpu' elsewhere."""
    return "gpu" if device_type == "cuda" else "cpu"
