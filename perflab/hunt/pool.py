"""The planted regressions as data: each one is a switch on one training step (`perflab.hunt.step`).

    >>> [r.name for r in POOL]                     # the candidates this CPU step can host
    >>> regression("gc").category, regression("gc").fix
    >>> CATEGORIES                                 # what a learner's claim may name (about 15)
    >>> NOT_HERE                                   # candidates left out here, each with its reason

Every regression is a mistake people make in real training loops, and each has one fix: the
switch turned back. A regression is *kept* on a machine only when its measured cost (the step's
extra time with it on, over the clean step's time, `perflab.hunt.step.measure_costs`) is at least
`KEEP_SHARE` of the clean step there; the others are left out of that machine's draws.

Every regression leaves the model alone: the clean step and the step with any set of regressions
train the same weights on the same data, so their losses agree within fp32's tolerance (the
parity every fix must keep). The `MODEL_FIXES` are the tempting "fixes" that make the step faster
by training a different model; the grader penalises them.
"""

from __future__ import annotations

from dataclasses import dataclass

from perflab.core.errors import InputError

KEEP_SHARE = 0.15  # a regression is kept where it costs at least 15 % of the clean step


@dataclass(frozen=True)
class Regression:
    name: str  # the switch
    category: str  # what a correct claim names (CATEGORIES)
    fix: str  # the fix switch that turns it back (FIXES)
    what: str  # what is planted, in words
    instrument: str  # the instrument whose evidence shows it
    evidence: str  # what that instrument shows when it is on
    source: str  # the public thread or doc where people meet it
    conflicts: tuple[str, ...] = ()  # regressions it cannot be drawn with (they set the same knob)


POOL: tuple[Regression, ...] = (
    Regression("loader", "data_loader_workers", "loader_workers",
               "num_workers=0: every sample's slow read (a wait on storage) runs in the training loop",
               "the phase timer's data share (lesson 07's timer around next()) and the profiler's diagnosis (data_wait)",
               "the step waits for `next()`: the data phase is a large share of the step",
               "https://github.com/pytorch/kineto/issues/610", conflicts=("respawn",)),
    Regression("respawn", "persistent_workers", "persistent_workers",
               "persistent_workers=False on a short epoch: the workers (each opening the data set, a costly start) "
               "are started again every epoch",
               "the DataLoader's worker processes (new worker process ids after the first epoch: worker starts per "
               "epoch) and the data wait on each epoch's first step",
               "worker processes start again every epoch; the data wait sits on each epoch's first step",
               "https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader", conflicts=("loader",)),
    Regression("host_stats", "host_sync_logging", "log_on_device",
               "a logging hook copies every Linear layer's output to the host (`.cpu().numpy()`) and computes "
               "percentiles there, every step. On a CPU nothing waits for a device: what it costs here is the "
               "copies and the percentiles; on a GPU each `.cpu()` also waits until every queued kernel has run "
               "(a host sync), so the GPU idles while the host computes",
               "the profiler's op table (aten::isfinite, aten::item and a host copy once per Linear layer) and the "
               "phase timer's forward share",
               "aten::isfinite appears, once per Linear layer, with as many aten::item calls more",
               "https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution"),
    Regression("clip_loop", "grad_clip_per_tensor", "clip_foreach",
               "gradient clipping written in Python, one tensor at a time, reading each norm back with `.item()`",
               "the phase timer's clip share and the profiler's op calls against the clean step's: no "
               "aten::_foreach_norm, and one aten::item more per parameter tensor (on a CPU the clean step's "
               "_foreach_norm also runs one aten::linalg_vector_norm per tensor, so the norm count alone does not "
               "tell them apart)",
               "no aten::_foreach_norm, and as many more aten::item calls than the clean step as there are "
               "parameter tensors",
               "https://pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html"),
    Regression("adamw_loop", "optimizer_for_loop", "adamw_foreach",
               "AdamW with foreach=False: about ten small ops per parameter tensor",
               "the phase timer's optimizer share and the profiler's op calls against the clean step's: no "
               "aten::_foreach_* calls in the optimizer (on a CPU the clean step's foreach ops also run per tensor "
               "underneath, so its per-tensor aten::lerp_/add_/mul_ counts are no evidence alone)",
               "no aten::_foreach_lerp_/_foreach_addcdiv_ calls, where the clean step has them",
               "https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html"),
    Regression("attention", "attention_written_out", "use_sdpa",
               "attention written out as softmax(QKᵀ/√d)·V with a mask, instead of F.scaled_dot_product_attention",
               "the profiler's op table (aten::softmax, aten::masked_fill and matmuls on s×s scores; no "
               "aten::scaled_dot_product_attention) and the forward and backward shares",
               "the s×s scores appear as ops of their own",
               "https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html"),
    Regression("threads_over", "threads_oversubscribed", "threads_match_cores",
               "torch.set_num_threads at four times the cores this process may use: OpenMP threads wait for each other",
               "the thread counter (torch.get_num_threads against the cores of os.sched_getaffinity) and every "
               "compute phase slower at once",
               "more intra-op threads than usable cores",
               "https://pytorch.org/docs/stable/notes/cpu_threading_torchscript_inference.html"),
    Regression("gc", "gc_full_collections", "no_gc_in_step",
               "`gc.collect()` in the step (a memory-hygiene line): a full collection walks every container object "
               "the collector tracks (lists, dicts, class instances: not ints or strings), every step",
               "the gc counter (gen-2 collections per step, gc.callbacks) and a gap in the profiler's timeline "
               "with no op in it",
               "one or more full collections every step",
               "https://docs.python.org/3/library/gc.html#gc.collect"),
)
_BY = {r.name: r for r in POOL}
NAMES = tuple(_BY)

# What a claim may name: the pool's categories, and others a learner may suspect that this pool
# never plants (claiming one of them is a wrong claim, not an error)
CATEGORIES: tuple[str, ...] = tuple(dict.fromkeys([r.category for r in POOL] + [
    "threads_starved", "collate_copy", "print_tensor", "graph_break", "recompile", "fp32_not_bf16", "denormals",
    "pageable_copies", "no_sync_accumulation"]))

# The fixes a report may ask for: the pool's, then the tempting ones that change the model
FIXES: dict[str, str] = {}
for _r in POOL:
    FIXES.setdefault(_r.fix, f"turn back: {_r.what}")
FIXES["threads_match_cores"] = "torch.set_num_threads(the cores this process may use)"
MODEL_FIXES: dict[str, str] = {
    "half_batch": "halve the batch (fewer samples per step: a different optimisation, not the same step faster)",
    "shorter_seq": "cut the sequence length in half (the model sees less context)",
    "no_clipping": "drop gradient clipping (the updates change)",
    "fewer_layers": "drop a transformer block (a different model)",
}
ALL_FIXES: dict[str, str] = {**FIXES, **MODEL_FIXES}

NOT_HERE: dict[str, str] = {
    "threads_starved": "the clean step runs on one intra-op thread (on a machine shared with others, more threads than "
                       "free cores make every parallel region wait for its slowest thread), so there is nothing to "
                       "starve; on a machine of your own, `torch.get_num_threads()` below the usable cores is the sign",
    "collate_copy": "not planted yet: its cost at the lesson's sizes has not been measured here (a collate that copies "
                    "matters most where batches are large, such as images fed to a GPU)",
    "print_tensor": "not planted yet: its cost at the lesson's sizes has not been measured here (torch prints a summary "
                    "of a large tensor, and on a GPU the print also waits for the device: a host sync)",
    "graph_break": "needs torch.compile, whose first compile takes tens of seconds on a CPU: too slow to draw and "
                   "re-measure per fix in this lesson (lesson 10 finds breaks with `perflab compile --explain`)",
    "recompile": "needs torch.compile as above; each recompile costs seconds of compile time on a CPU",
    "fp32_not_bf16": "the clean step would be bf16, and every other fix would then be judged at bf16's looser "
                     "parity; whether bf16 pays on a CPU is lesson 11's bf16 rung (`perflab tune --rungs bf16`)",
    "denormals": "torch.set_flush_denormal covers only the calling thread, not torch's intra-op threads, so the "
                 "fix does not hold on every thread; lesson 11 measures whether this CPU pays "
                 "(perflab.core.denormals)",
    "pageable_copies": "GPU only: pinned memory and non_blocking copies do nothing without an accelerator",
    "unpadded_vocab": "GPU only: padding 50,257 to 50,304 leaves the number of 64-, 128- and 256-wide tiles across the "
                      "vocabulary unchanged; the cost is alignment: a bf16 row of 50,257 values is not a multiple of "
                      "16 bytes, so the GEMMs with the vocabulary as a dimension lose the aligned Tensor Core paths "
                      "(perflab.tune.rungmath.vocab_padding)",
    "cudnn_benchmark": "GPU only: cuDNN's autotuner; this step has no convolutions either",
    "misaligned_width": "GPU only: lesson 04's cliff comes from tiles and waves of SMs",
    "cross_numa": "needs two NUMA nodes; `perflab numa` shows how many this machine has",
    "no_sync_accumulation": "distributed (2 ranks on gloo): starting a torchrun job per measurement takes seconds, "
                            "too slow for per-fix re-runs here; lesson 06 measures communication",
    "straggler_rank": "distributed, as above",
    "per_tensor_allreduce": "distributed, as above (lesson 09's `comm` fault plants it and names it)",
}


def regression(name: str) -> Regression:
    key = str(name).strip().lower()
    if key not in _BY:
        raise InputError(f"unknown regression {name!r}: choose from {', '.join(NAMES)}")
    return _BY[key]


def parse_pool(text: str | None) -> tuple[str, ...]:
    """A teacher's pool ('gc,loader,attention' or None for all), checked; order kept."""
    if text is None or not str(text).strip():
        return NAMES
    items = [p.strip().lower() for p in str(text).split(",") if p.strip()]
    for i in items:
        regression(i)
    return tuple(dict.fromkeys(items))


def fix_for(name: str) -> str:
    return regression(name).fix


def regressions_fixed_by(fix: str) -> tuple[str, ...]:
    return tuple(r.name for r in POOL if r.fix == fix)


def distinguishing_instrument(a: str, b: str) -> str:
    """Which instrument tells regressions `a` and `b` apart (the lesson's table of pairs)."""
    ra, rb = regression(a), regression(b)
    if frozenset((a, b)) in _TELL:
        return _TELL[frozenset((a, b))]
    phase_a, phase_b = _PHASE[ra.name], _PHASE[rb.name]
    if phase_a != phase_b:
        return f"the phase timer: {a} costs in {phase_a}, {b} in {phase_b}"
    return f"the op table and counters: {ra.evidence}; {rb.evidence}"


# where each regression's extra time lands in the phase timer (`perflab.hunt.step.PHASES`)
_PHASE = {"loader": "data", "respawn": "data", "host_stats": "forward", "clip_loop": "clip",
          "adamw_loop": "optimizer", "attention": "forward and backward", "threads_over": "forward and backward",
          "gc": "other"}
_TELL = {
    frozenset(("loader", "respawn")): "the DataLoader's workers: none with loader (a wait every step), new worker "
                                      "processes every epoch with respawn",
    frozenset(("host_stats", "attention")): "the op table: aten::isfinite per layer with host_stats, aten::masked_fill "
                                            "and aten::softmax with attention written out",
    frozenset(("host_stats", "threads_over")): "the op table (aten::isfinite per layer) and the thread counter",
    frozenset(("attention", "threads_over")): "the thread counter (threads against usable cores), and the op table "
                                              "(softmax and masked_fill appear only with attention written out)",
}


def pool_table():
    """The pool for a person: each regression, what is planted (and what it costs here and on a GPU,
    where the two differ), its category, fix and the instrument that shows it."""
    import pandas as pd

    return pd.DataFrame([{"regression": r.name, "what is planted": r.what, "category": r.category, "fix": r.fix,
                          "instrument": r.instrument} for r in POOL])


def not_here_table():
    """The candidates this CPU step does not host, each with its reason."""
    import pandas as pd

    return pd.DataFrame([{"candidate": k, "why not here": v} for k, v in NOT_HERE.items()])


def pairs_table():
    """Every pair of pool members whose extra time lands in the same phase, and the instrument that
    tells them apart (pairs in different phases are told apart by the phase timer)."""
    import pandas as pd

    rows = []
    for i, a in enumerate(NAMES):
        for b in NAMES[i + 1:]:
            if _PHASE[a] == _PHASE[b] or (_PHASE[a] in _PHASE[b] or _PHASE[b] in _PHASE[a]):
                rows.append({"pair": f"{a} / {b}", "tell them apart with": distinguishing_instrument(a, b)})
    return pd.DataFrame(rows)
