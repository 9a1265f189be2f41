"""Apply the ladder's rungs to one training step, cumulatively, and measure every rung.

    >>> res = run_ladder("cpu")                       # every rung; resumes from saved rungs
    >>> res = run_ladder("cpu", rungs="sdpa,compile", fresh=True)
    >>> res.rows[-1]["speedup_vs_baseline"], res.fastest["rung"]

Each rung's row: `rung`, `step_s` (median wall seconds of one optimizer step, data wait included),
`tokens_per_s`, `mfu`/`hfu` (against the spec peak where the spec sheet has one, else against the
measured matmul ceiling, and `mfu_basis` says which; both kinds are kept as `mfu_spec`, `mfu_ceiling`,
`hfu_spec`, `hfu_ceiling`), `peak_bytes`, `loss` (after warmup + steps optimizer steps), `loss_delta`
(against the baseline's), `parity_ok` (within the dtype's tolerance, `perflab.compiler.parity`),
`speedup_vs_baseline`, `adopted` and `note`, plus the step's phases and the waterfall's breakdown.

A rung that does not apply here (NUMA binding on one node, checkpointing where memory does not need
it) is recorded with `applicable: false`, its reason, and the figures of the configuration it leaves
unchanged (`measured: false`). Rows are saved as they are measured (`perflab.core.results`), so a
ladder stopped halfway resumes; `fresh=True` sets the old file aside and measures again.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

from perflab.core.dtypes import native_bf16
from perflab.core.errors import InputError, PerflabError
from perflab.core.validate import positive_int
from perflab.tune.ladder import TunePreset, parse_rungs
from perflab.tune.ladder import preset as tune_preset
from perflab.tune.ladder import rung as rung_of
from perflab.workload.models import Attention, ModelConfig, build_model
from perflab.workload.train import StepRunner, next_token_loss

PAD_MULTIPLE = 64
ADOPT_MIN_GAIN = 0.02  # a rung is adopted when it makes the step at least 2 % faster (less is timing noise)
FIELDS = ("rung", "step_s", "tokens_per_s", "mfu", "hfu", "peak_bytes", "loss_delta", "speedup_vs_baseline")


class ParityError(PerflabError):
    """A rung changed the model's loss beyond the dtype's tolerance: the ladder stops there."""


# ---------------------------------------------------------------- a step's configuration


@dataclass(frozen=True)
class StepConfig:
    """Everything the ladder changes about the step (the baseline is the default)."""

    dtype: str = "fp32"  # 'fp32' or 'bf16' (autocast)
    optimizer: str = "loop"  # 'loop' (for-loop AdamW), 'foreach' or 'fused'
    pad_vocab: bool = False
    sdpa: bool = False  # False: attention written out (softmax(QKᵀ/√d)·V)
    compiled: bool = False
    micro_batch: int = 2
    checkpointing: bool = False
    workers: int = 0
    pin_memory: bool = False
    numa_node: int | None = None  # bound to this node's CPUs

    def as_dict(self) -> dict[str, Any]:
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


def make_optimizer(params, kind: str, device: torch.device) -> torch.optim.Optimizer:
    kw: dict[str, Any] = {"lr": 1e-3}
    if kind == "loop":
        kw["foreach"] = False
    elif kind == "foreach":
        kw["foreach"] = True
    elif kind == "fused":
        kw["fused"] = True
    else:
        raise InputError(f"unknown optimizer kind {kind!r}")
    return torch.optim.AdamW(params, **kw)


def fused_adamw_available(device: torch.device) -> bool:
    """torch's fused AdamW runs on CUDA, and on CPU since torch 2.4."""
    try:
        p = torch.nn.Parameter(torch.zeros(2, device=device))
        opt = torch.optim.AdamW([p], fused=True)
        p.grad = torch.zeros_like(p)
        opt.step()
        return True
    except (RuntimeError, TypeError, ValueError):
        return False


# ---------------------------------------------------------------- data


class TokenSequences(torch.utils.data.Dataset):
    """Sequence i of a fixed random corpus (inputs, next-token targets), read with `io_s` of storage
    latency (a wait that uses no core, as lesson 07's dataset). Deterministic per index, so every
    configuration sees the same sequences in the same order."""

    def __init__(self, n: int, seq: int, vocab: int, io_s: float = 0.0, seed: int = 0):
        self.n, self.seq, self.vocab, self.io_s, self.seed = n, seq, vocab, io_s, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.io_s:
            time.sleep(self.io_s)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        ids = torch.randint(0, self.vocab, (self.seq + 1,), generator=g)
        return ids[:-1], ids[1:]


def make_loader(ds: TokenSequences, sc: StepConfig, device: torch.device):
    kw: dict[str, Any] = {}
    if sc.workers > 0:
        kw = {"prefetch_factor": 4, "persistent_workers": False}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        return torch.utils.data.DataLoader(ds, batch_size=sc.micro_batch, shuffle=False, num_workers=sc.workers,
                                           pin_memory=sc.pin_memory and device.type == "cuda", **kw)


@contextlib.contextmanager
def bound_to(cpus: list[int] | None):
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


# ---------------------------------------------------------------- one configuration, measured


@dataclass
class Measurement:
    step_s: float
    step_times_s: list[float]
    data_wait_s: float
    forward_s: float
    backward_s: float
    optimizer_s: float
    compile_s: float | None
    tokens_per_step: int
    losses: list[float]
    peak_bytes: int
    peak_how: str
    model_flops: int
    hardware_flops: int
    breakdown: dict[str, float] = field(default_factory=dict)

    @property
    def loss(self) -> float:
        return self.losses[-1]


def _static_bytes(model: torch.nn.Module, opt: torch.optim.Optimizer) -> int:
    n = sum(p.numel() * p.element_size() for p in model.parameters())
    for st in opt.state.values():
        n += sum(v.numel() * v.element_size() for v in st.values() if torch.is_tensor(v))
    return n


def measure_config(tp: TunePreset, sc: StepConfig, *, steps: int, warmup: int, device: torch.device,
                   profile: bool = True, progress: Callable[[str], None] | None = None) -> Measurement:
    """Train `warmup + steps` optimizer steps of configuration `sc` from the same weights and data,
    time the last `steps`, then one step for its peak memory and one profiled step for the waterfall."""
    from perflab.flops.transformer import exact_flops
    from perflab.tune.waterfall import breakdown_of_trace, profile_steps

    cfg, G, mb = tp.cfg, tp.global_batch, sc.micro_batch
    if G % mb:
        raise InputError(f"micro-batch {mb} does not divide the global batch {G}: choose a divisor of {G}")
    gas = G // mb
    n_steps = warmup + steps + 2  # + one for memory, + one profiled
    ds = TokenSequences(G * n_steps, tp.seq, cfg.vocab, tp.io_ms / 1e3)
    cpus = None
    if sc.numa_node is not None:
        from perflab.numa.topology import read_topology

        cpus = next((n.cpus for n in read_topology().nodes if n.id == sc.numa_node), None)
    with bound_to(cpus):
        model = build(cfg, sc, device)
        opt = make_optimizer(model.parameters(), sc.optimizer, device)
        fwd: Any = torch.compile(model) if sc.compiled else model
        micro_losses: list[torch.Tensor] = []
        V = cfg.vocab

        def loss_fn(logits, y):
            loss = next_token_loss(logits[..., :V], y)
            micro_losses.append(loss.detach())
            return loss

        runner = StepRunner(fwd, opt, grad_accum=gas, autocast_dtype=torch.bfloat16 if sc.dtype == "bf16" else None,
                            loss_fn=loss_fn, device=device)
        loader = make_loader(ds, sc, device)
        it = iter(loader)
        nb = sc.pin_memory and device.type == "cuda"

        def next_step_batches():
            out = []
            for _ in range(gas):
                x, y = next(it)
                out.append((x.to(device, non_blocking=nb), y.to(device, non_blocking=nb)))
            return out

        def one_step():
            t0 = time.perf_counter()
            with torch.profiler.record_function("data"):
                mbs = next_step_batches()
            data_s = time.perf_counter() - t0
            micro_losses.clear()
            t = runner.step(mbs)
            loss = float(torch.stack(micro_losses).mean())
            return data_s, t, loss

        losses, walls, datas, times = [], [], [], []
        compile_s = None
        first = None
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            d, t, loss = one_step()
            wall = time.perf_counter() - t0
            losses.append(loss)
            if i == 0:
                first = wall
            if i >= warmup:
                walls.append(wall)
                datas.append(d)
                times.append(t)
            if progress:
                progress(f"step {i + 1}/{warmup + steps}")
        step_s = statistics.median(walls)
        if sc.compiled and first is not None:
            compile_s = max(first - step_s, 0.0)
        # peak memory of one more step
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            peak = torch.cuda.max_memory_allocated(device)
            how = "torch.cuda.max_memory_allocated over the run"
        else:
            from perflab.memory.probe import allocated_during
            from perflab.tune.waterfall import _quiet_fd2

            base = _static_bytes(model, opt) + 2 * G // gas * tp.seq * 8 * 2
            with _quiet_fd2():  # the profiler's allocator notes are C++ lines on fd 2
                rise = allocated_during(one_step, device)["peak_bytes"]
            peak = base + rise
            how = "weights + AdamW states + batches, plus the step's allocations (profiler memory events)"
        breakdown: dict[str, float] = {}
        if profile:
            trace = profile_steps(one_step, device)
            breakdown = breakdown_of_trace(trace, step_s)

    real = cfg
    hw_cfg = cfg.with_(vocab=padded_vocab(cfg.vocab)) if sc.pad_vocab else cfg
    mf = exact_flops(real, mb, tp.seq, checkpointing=sc.checkpointing, fused_attention=sc.sdpa).model * gas
    hf = exact_flops(hw_cfg, mb, tp.seq, checkpointing=sc.checkpointing, fused_attention=sc.sdpa).hardware * gas
    return Measurement(step_s, walls, statistics.median(datas), statistics.median(t.forward_s for t in times),
                       statistics.median(t.backward_s for t in times), statistics.median(t.optimizer_s for t in times),
                       compile_s, G * tp.seq, losses, int(peak), how, mf, hf, breakdown)


# ---------------------------------------------------------------- utilization


@dataclass(frozen=True)
class Rates:
    peak_tflops: float | None
    peak_source: str
    ceiling_tflops: float | None
    ceiling_label: str


_RATES: dict[tuple[str, str], Rates] = {}


def rates(device: torch.device, dtype: str) -> Rates:
    """The spec peak (only from a spec sheet: an estimated CPU peak is not used) and the measured
    matmul ceiling for `dtype`, measured once per process."""
    key = (str(device), dtype)
    if key not in _RATES:
        from perflab.core.device import describe
        from perflab.core.hardware import peaks_for
        from perflab.flops.mfu import matmul_ceiling

        peaks = peaks_for(describe(device))
        peak = peaks.get(dtype) if peaks.source == "spec sheet" else None
        src = "spec sheet" if peak else ("peak unknown (no spec sheet for this CPU: the estimate is not used)"
                                         if device.type == "cpu" else "peak unknown")
        ceil = matmul_ceiling(device, dtype, None if device.type == "cuda" else 1024)
        _RATES[key] = Rates(peak, src, ceil.tflops, ceil.label)
    return _RATES[key]


def utilization(m: Measurement, r: Rates) -> dict[str, Any]:
    mt, ht = m.model_flops / m.step_s / 1e12, m.hardware_flops / m.step_s / 1e12
    out = {"model_tflops": mt, "hardware_tflops": ht, "peak_tflops": r.peak_tflops, "peak_source": r.peak_source,
           "ceiling_tflops": r.ceiling_tflops, "ceiling_label": r.ceiling_label,
           "mfu_spec": mt / r.peak_tflops if r.peak_tflops else None,
           "hfu_spec": ht / r.peak_tflops if r.peak_tflops else None,
           "mfu_ceiling": mt / r.ceiling_tflops if r.ceiling_tflops else None,
           "hfu_ceiling": ht / r.ceiling_tflops if r.ceiling_tflops else None}
    spec = r.peak_tflops is not None
    out["mfu"] = out["mfu_spec"] if spec else out["mfu_ceiling"]
    out["hfu"] = out["hfu_spec"] if spec else out["hfu_ceiling"]
    out["mfu_basis"] = "spec peak" if spec else "measured ceiling (peak unknown)"
    return out


# ---------------------------------------------------------------- the rungs as changes


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


# ---------------------------------------------------------------- the ladder


def tolerance_for(dtype: str) -> float:
    from perflab.compiler.parity import tolerance

    return tolerance(torch.bfloat16 if dtype == "bf16" else torch.float32)


@dataclass
class LadderResult:
    preset: str
    device: str
    rows: list[dict[str, Any]]
    stopped: str | None  # why the ladder stopped early (a parity failure), else None
    path: str
    measured: int = 0
    resumed: int = 0

    @property
    def baseline(self) -> dict[str, Any]:
        return self.rows[0]

    @property
    def fastest(self) -> dict[str, Any]:
        ok = [r for r in self.rows if r.get("parity_ok")]
        return min(ok, key=lambda r: r["step_s"])

    @property
    def final(self) -> dict[str, Any]:
        """The configuration the ladder ends with (the last adopted rung)."""
        adopted = [r for r in self.rows if r.get("adopted")]
        return adopted[-1] if adopted else self.rows[0]

    def table(self):
        import pandas as pd

        return pd.DataFrame([{k: r.get(k) for k in FIELDS + ("adopted", "note")} for r in self.rows])

    def frame(self):
        """The rows for a person: every figure rounded, with its unit (`perflab.core.readout`)."""
        import pandas as pd

        from perflab.core.readout import nbytes, num, percent, seconds

        out = []
        for r in self.rows:
            state = "adopted" if r.get("adopted") else ("n/a here" if not r.get("applicable", True) else "kept out")
            out.append({"rung": r["rung"], "step": seconds(r["step_s"]), "tokens/s": num(r["tokens_per_s"]),
                        "MFU": percent(r["mfu"]), "HFU": percent(r["hfu"]), "peak memory": nbytes(r["peak_bytes"]),
                        "loss Δ": f"{r['loss_delta']:+.1e}", "parity": "ok" if r.get("parity_ok") else "BROKEN",
                        "vs baseline": f"{r['speedup_vs_baseline']:.2f}×",
                        "vs previous": f"{r.get('speedup_vs_previous', 1.0):.2f}×", "state": state,
                        "lesson": r.get("lesson", "")})
        return pd.DataFrame(out)

    def as_dict(self) -> dict[str, Any]:
        return {"preset": self.preset, "device": self.device, "rows": self.rows, "stopped": self.stopped,
                "results_file": self.path, "fastest": self.fastest["rung"] if self.rows else None}


def _row_from(name: str, change: Change, m: Measurement | None, prev: dict | None, base: dict | None,
              r: Rates | None, tp: TunePreset, device: torch.device) -> dict[str, Any]:
    info = rung_of(name)
    row: dict[str, Any] = {"rung": name, "title": info.title, "lesson": info.lesson, "changes": info.changes,
                           "applicable": change.applicable, "note": change.note, "config": change.config.as_dict(),
                           **change.extra}
    if m is None:  # not applicable: the configuration it leaves unchanged
        assert prev is not None
        for k in ("step_s", "step_times_s", "tokens_per_s", "mfu", "hfu", "mfu_spec", "hfu_spec", "mfu_ceiling",
                  "hfu_ceiling", "mfu_basis", "peak_tflops", "peak_source", "ceiling_tflops", "ceiling_label",
                  "model_tflops", "hardware_tflops", "peak_bytes", "peak_how", "loss", "losses", "data_wait_s",
                  "forward_s", "backward_s", "optimizer_s", "compile_s", "breakdown", "tokens_per_step"):
            row[k] = prev.get(k)
        row.update(measured=False, adopted=False, parity_ok=prev.get("parity_ok"), tolerance=prev.get("tolerance"),
                   loss_delta=prev.get("loss_delta"), loss_rel=prev.get("loss_rel"),
                   speedup_vs_baseline=prev.get("speedup_vs_baseline"), speedup_vs_previous=1.0)
        return row
    assert r is not None
    row.update(measured=True, step_s=m.step_s, step_times_s=m.step_times_s, tokens_per_step=m.tokens_per_step,
               tokens_per_s=m.tokens_per_step / m.step_s, peak_bytes=m.peak_bytes, peak_how=m.peak_how,
               loss=m.loss, losses=m.losses, data_wait_s=m.data_wait_s, forward_s=m.forward_s,
               backward_s=m.backward_s, optimizer_s=m.optimizer_s, compile_s=m.compile_s, breakdown=m.breakdown,
               model_flops_per_step=m.model_flops, hardware_flops_per_step=m.hardware_flops, **utilization(m, r))
    tol = tolerance_for(change.config.dtype)
    b_loss = m.loss if base is None else base["loss"]
    row["loss_delta"] = m.loss - b_loss
    row["loss_rel"] = abs(row["loss_delta"]) / max(abs(b_loss), 1e-12)
    row["tolerance"] = tol
    row["parity_ok"] = row["loss_rel"] <= tol
    b_step = m.step_s if base is None else base["step_s"]
    row["speedup_vs_baseline"] = b_step / m.step_s
    row["speedup_vs_previous"] = (prev["step_s"] / m.step_s) if prev else 1.0
    row["adopted"] = bool(row["parity_ok"] and (prev is None or m.step_s * (1 + ADOPT_MIN_GAIN) < prev["step_s"]))
    budget = tp.memory_budget_bytes
    if name in ("batch", "checkpoint") and budget is not None:
        row["fits_budget"] = m.peak_bytes <= budget
        if not row["fits_budget"]:
            row["adopted"] = False
    row["explain"] = explain(name, row, prev, device)
    return row


def explain(name: str, row: dict[str, Any], prev: dict[str, Any] | None, device: torch.device) -> str:
    """One sentence: what the rung did here and why (computed from the measurements)."""
    if prev is None:
        bd = row.get("breakdown") or {}
        top = max(bd, key=lambda k: bd[k]) if bd else None
        return f"the reference step; most of its time is {top}" if top else "the reference step"
    sp = row["speedup_vs_previous"]
    verdict = f"{sp:.2f}× the previous step's speed"
    if not row["parity_ok"]:
        return f"loss moved {row['loss_rel']:.1e} (relative), beyond the {row['tolerance']:.0e} tolerance of {row['config']['dtype']}"
    if row["adopted"]:
        return f"helps here: {verdict}"
    cause = {
        "bf16": "the conversions to and from bf16 cost more than the faster products save at these sizes"
                if device.type == "cpu" else "the step is not bound by matmul rate here",
        "adamw": "the optimizer was a small share of the step",
        "vocab64": "the padded columns are extra work and the CPU's matmul gains little from aligned rows"
                   if device.type == "cpu" else "the logits GEMM was already efficient at this shape",
        "sdpa": "at this sequence length the s×s scores are small: there is little traffic to save",
        "compile": "the compiled wrapper's guards and the generated C++ cost more than the fusion saves at this size"
                   if device.type == "cpu" else "the step was already matmul-bound",
        "batch": "the larger micro-batch's matmuls run no faster per FLOP here",
        "checkpoint": "the recomputed forward costs more than the larger micro-batch gains",
        "loader": "the data wait was already small, and the workers take cores from the step",
        "numa": "binding did not change where memory lives",
    }.get(name, "")
    return f"does not help here ({verdict}): {cause}" if cause else f"does not help here ({verdict})"


def run_ladder(preset: str | TunePreset = "cpu", rungs: str | Sequence[str] | None = None, *, steps: int | None = None,
               batch: int | None = None, fresh: bool = False, device=None, path=None,
               progress: bool | Callable[[str], None] = False, profile: bool = True) -> LadderResult:
    """Apply `rungs` (default: all, in the ladder's order) one after another and measure each.

    steps: timed optimizer steps per rung (default: the preset's). batch: the global batch in
    sequences (default: the preset's). A rung whose loss leaves the dtype's tolerance stops the
    ladder: `stopped` says which and by how much, and no later rung is measured."""
    from pathlib import Path

    from perflab.core.device import describe, pick_device
    from perflab.core.results import run_sweep, sweep_path

    tp = tune_preset(preset) if isinstance(preset, str) else preset
    names = parse_rungs(rungs)
    if steps is not None:
        tp = replace(tp, steps=positive_int("steps", steps))
    if batch is not None:
        b = positive_int("batch", batch)
        if b % tp.micro_batch:
            raise InputError(f"--batch {b} is not a multiple of the baseline micro-batch {tp.micro_batch}: "
                             f"try {max(tp.micro_batch, b - b % tp.micro_batch)}")
        tp = replace(tp, global_batch=b)
    dev = torch.device(device) if device is not None else pick_device()
    info = describe(dev)
    p = Path(path) if path is not None else sweep_path(f"tune_{tp.name}", info.slug)
    if fresh and p.exists():
        p.rename(p.with_name(f"{p.stem}.{time.strftime('%Y%m%d-%H%M%S')}.jsonl"))
    say = _progress_printer(progress)

    rows: list[dict[str, Any]] = []
    sc = StepConfig(micro_batch=tp.micro_batch)
    base: dict | None = None
    prev: dict | None = None  # the row of the configuration the next rung builds on
    stopped = None
    res_meas = res_skip = 0
    for i, name in enumerate(names):
        change = apply_rung(name, sc, tp, dev, rows)
        params = {"preset": tp.name, "model": tp.cfg.name, "global_batch": tp.global_batch, "steps": tp.steps,
                  "warmup": tp.warmup, "position": i, "before": ",".join(names[:i]), "rung": name,
                  "config": change.config.as_dict(), "applicable": change.applicable}

        def one(_p, name=name, change=change, prev=prev, base=base):
            if not change.applicable and prev is not None:
                return _row_from(name, change, None, prev, base, None, tp, dev)
            if say:
                say(f"[{names.index(name) + 1}/{len(names)}] {name}: {rung_of(name).title} …")
            with _quiet_compile():
                m = measure_config(tp, change.config, steps=tp.steps, warmup=tp.warmup, device=dev, profile=profile,
                                   progress=None)
            return _row_from(name, change, m, prev, base, rates(dev, change.config.dtype), tp, dev)

        res = run_sweep(f"tune_{tp.name}", [params], one, path=p, retry_failed=True, progress=False)
        if res.interrupted or not res.rows:
            stopped = "interrupted: run the same command again to resume"
            break
        row = res.rows[0]
        res_meas += res.measured
        res_skip += res.skipped
        if row.get("status") != "ok":
            raise PerflabError(f"rung {name!r} failed: {row.get('reason')}")
        row = {k: v for k, v in row.items() if k not in ("params",)}
        rows.append(row)
        if say and res.skipped:
            say(f"[{i + 1}/{len(names)}] {name}: already measured (resumed from {p})")
        if base is None:
            base = row
        if row.get("measured") and not row.get("parity_ok"):
            stopped = (f"rung {name!r} broke parity: loss {row['loss']:.6g} vs the baseline's {base['loss']:.6g} "
                       f"(relative {row['loss_rel']:.1e} > tolerance {row['tolerance']:.0e} for {row['config']['dtype']}); "
                       "the ladder stops here: find what changed the model before going on")
            break
        if row.get("adopted") or prev is None:
            prev = row
            sc = StepConfig(**row["config"])
    return LadderResult(tp.name, info.name, rows, stopped, str(p), res_meas, res_skip)


def _progress_printer(progress: bool | Callable[[str], None]) -> Callable[[str], None] | None:
    """A callable that reports progress: the one given, stderr for True, None for False."""
    if callable(progress):
        return progress
    if not progress:
        return None
    import sys

    def to_stderr(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    return to_stderr


@contextlib.contextmanager
def _quiet_compile():
    """torch.compile's and the DataLoader's warnings are the lesson's to explain, not noise to print."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
