"""Checks for lab 03 (labs/03_memory.ipynb): predict the memory of a training step, then measure it.

The first three checks grade formulas against perflab's estimator, which the tests pin to the
published figures (the ZeRO paper's Figure 1, Korthikanti et al.'s Table 2). The last one does not
compare with a formula at all: it *measures* the peak of a steady-state training step of perflab's
model on this device (torch's allocator: exact on CPU via the profiler's memory events, the CUDA
caching allocator's `max_memory_allocated` on a GPU) and grades the learner's prediction against
that within `peak_tolerance(device)`: ±5% on a CPU, where torch's allocator is exact and the slack
covers the small terms a learner may leave out (norm statistics, attention's log-sum-exp, token ids);
±10% on a GPU, where the caching allocator rounds blocks and libraries take workspaces from it.
"""

from __future__ import annotations

from functools import lru_cache

from perflab.grading.checks import NOT_DONE, Verdict, attempt, fail, grade, record
from perflab.memory import estimate
from perflab.memory.estimate import activations_per_layer_bytes, bytes_per_param, model_state_bytes

_FORBIDDEN = (bytes_per_param, model_state_bytes, activations_per_layer_bytes, estimate.model_activation_bytes,
              estimate.loss_gradient_bytes, estimate.step_phases)

_W = {"fp32": 4, "mixed": 6, "bf16": 2}
_G = {"fp32": 4, "fp16": 2, "bf16": 2}
_STATES = {"adamw": 2, "sgd": 1, "lion": 1}


def _bpp(precision, optimizer, grad_dtype, *, weights=None, grads=None, states=None, state=None):
    w = _W[precision] if weights is None else weights(precision)
    g = _G[grad_dtype] if grads is None else grads
    n = _STATES[optimizer] if states is None else states(optimizer)
    sb = (2 if precision == "bf16" else 4) if state is None else state
    return w + g + n * sb


BPP_MISTAKES = [
    ("mixed precision keeps an fp32 master copy (4 bytes) beside the 16-bit weights (2 bytes)",
     lambda precision, optimizer, grad_dtype: _bpp(precision, optimizer, grad_dtype,
                                                   weights=lambda p: {"fp32": 4, "mixed": 2, "bf16": 2}[p])),
    ("pure bf16 keeps its optimizer states in 2 bytes too (no fp32 copy anywhere)",
     lambda precision, optimizer, grad_dtype: _bpp(precision, optimizer, grad_dtype, state=4)),
    ("the gradients take grad_dtype's size (2 bytes in fp16/bf16, 4 in fp32)",
     lambda precision, optimizer, grad_dtype: _bpp(precision, optimizer, grad_dtype, grads=4)),
    ("SGD with momentum and Lion keep one state per parameter, AdamW two (the optimizer matters)",
     lambda precision, optimizer, grad_dtype: _bpp(precision, optimizer, grad_dtype, states=lambda o: 2)),
    ("SGD here has momentum: one state per parameter, not zero",
     lambda precision, optimizer, grad_dtype: _bpp(precision, optimizer, grad_dtype,
                                                   states=lambda o: {"adamw": 2, "sgd": 0, "lion": 1}[o])),
]


def _zero(params, stage, dp, *, shift=0, master_partitioned=True):
    st = stage + shift
    weights, grads, master, moments = 2 * params, 2 * params, 4 * params, 8 * params
    if st >= 1:
        moments /= dp
        if master_partitioned:
            master /= dp
    if st >= 2:
        grads /= dp
    if st >= 3:
        weights /= dp
    return weights + grads + master + moments


ZERO_MISTAKES = [
    ("one stage off: stage 1 partitions the optimizer states only, stage 2 adds the gradients, stage 3 the weights",
     lambda params, stage, dp: _zero(params, stage, dp, shift=1)),
    ("one stage off: stage 1 partitions the optimizer states only, stage 2 adds the gradients, stage 3 the weights",
     lambda params, stage, dp: _zero(params, stage, dp, shift=-1)),
    ("the fp32 master weights are one of the optimizer states (K = 12 = 4 + 4 + 4): stage 1 partitions them too",
     lambda params, stage, dp: _zero(params, stage, dp, master_partitioned=False)),
    ("stage 3 partitions the 16-bit weights too (2Ψ/dp)",
     lambda params, stage, dp: _zero(params, min(stage, 2), dp)),
]


def _act(s, b, h, a):
    return s * b * h * (34 + 5 * a * s / h)


ACT_MISTAKES = [
    ("the attention scores term 5as²b is missing (softmax output, its dropout mask and dropout output grow with s²)",
     lambda s, b, h, a: 34 * s * b * h),
    ("the scores are per head: 5·a·s²·b, with a heads", lambda s, b, h, a: 34 * s * b * h + 5 * s * s * b),
    ("that counts 4 bytes per value: the paper's activations are 16-bit (2 bytes), dropout masks 1 byte",
     lambda s, b, h, a: 2 * _act(s, b, h, a)),
    ("the MLP keeps 19sbh and the two LayerNorms 4sbh: the constant is 34, not 24 (did you leave out the LayerNorms "
     "and dropout masks?)", lambda s, b, h, a: s * b * h * (24 + 5 * a * s / h)),
]

PEAK_TOLERANCE = {"cpu": 0.05, "cuda": 0.10}  # fraction of the measured peak


def peak_tolerance(device=None) -> float:
    from perflab.core.device import pick_device

    dev = pick_device(device) if device is None or isinstance(device, str) else device
    return PEAK_TOLERANCE.get(dev.type, 0.10)


def check_bytes_per_param(fn) -> Verdict:
    """Grade `fn(precision, optimizer, grad_dtype) -> bytes per parameter` (weights + master weights +
    gradients + optimizer states, no partitioning)."""
    combos = [("mixed", "adamw", "fp32"), ("mixed", "adamw", "fp16"), ("fp32", "adamw", "fp32"),
              ("bf16", "adamw", "bf16"), ("mixed", "sgd", "fp32"), ("fp32", "sgd", "fp32"), ("mixed", "lion", "bf16")]
    cases = [({"precision": p, "optimizer": o, "grad_dtype": g}, sum(bytes_per_param(p, o, g).values()))
             for p, o, g in combos]
    return grade("bytes per parameter", fn, cases, mistakes=BPP_MISTAKES, forbidden=_FORBIDDEN,
                 hint="mixed precision keeps a 16-bit copy (2) and an fp32 master copy (4); pure bf16 keeps "
                      "everything, optimizer states included, in 2 bytes; AdamW has two states, SGD with momentum "
                      "and Lion one")


def check_zero(fn) -> Verdict:
    """Grade `fn(params, stage, dp) -> bytes per GPU` for mixed precision AdamW with fp16 gradients
    (the ZeRO paper's setting, K = 12)."""
    cases = [({"params": n, "stage": z, "dp": d}, sum(model_state_bytes(n, "mixed", "adamw", "fp16", z, d).values()))
             for n, d in ((7.5e9, 64), (1.3e9, 8), (175e9, 1024), (3e6, 6)) for z in (0, 1, 2, 3)]
    cases.append(({"params": 1e9, "stage": 3, "dp": 1}, sum(model_state_bytes(1e9, "mixed", "adamw", "fp16", 3, 1).values())))
    return grade("ZeRO memory per GPU", fn, cases, rtol=1e-9, mistakes=ZERO_MISTAKES, reference=lambda params, stage, dp: _zero(params, stage, dp),
                 forbidden=_FORBIDDEN,
                 hint="stage 1 divides the KΨ optimizer part by dp, stage 2 also the 2Ψ of gradients, stage 3 also "
                      "the 2Ψ of weights")


def check_activations(fn) -> Verdict:
    """Grade `fn(s, b, h, a) -> bytes` of one layer's activations without parallelism or
    recomputation (Korthikanti et al. 2022, eq. 1)."""
    shapes = [(2048, 1, 12288, 96), (1024, 8, 768, 12), (4096, 1, 4096, 32), (128, 3, 256, 8), (100, 2, 96, 7)]
    cases = [({"s": s, "b": b, "h": h, "a": a}, activations_per_layer_bytes(s, b, h, a)) for s, b, h, a in shapes]
    return grade("activations per layer", fn, cases, rtol=1e-9, mistakes=ACT_MISTAKES, reference=_act,
                 forbidden=_FORBIDDEN,
                 hint="attention 11sbh + 5as²b, MLP 19sbh, two LayerNorms 4sbh (16-bit values, 1-byte dropout masks)")


def peak_cases(device=None) -> list[dict]:
    """The shapes the peak check measures on this device: small on a CPU, large enough on a GPU that
    library workspaces stay inside the tolerance."""
    from perflab.core.device import pick_device
    from perflab.workload.models import preset

    dev = pick_device(device) if device is None or isinstance(device, str) else device
    if dev.type == "cuda":
        return [{"cfg": preset("gpt2-small"), "batch": 4, "seq": 512}, {"cfg": preset("small-gpt"), "batch": 16, "seq": 256}]
    return [{"cfg": preset("tiny-gpt"), "batch": 4, "seq": 128}, {"cfg": preset("small-gpt"), "batch": 2, "seq": 256}]


def measured_peak(cfg, batch: int, seq: int, device=None) -> int:
    """The measured peak bytes of the second (steady-state) training step: fp32, AdamW. Measured
    once per shape in this Python process, so re-running the check after a fix answers at once."""
    return _measured_peak(cfg, batch, seq, None if device is None else str(device))


@lru_cache(maxsize=8)
def _measured_peak(cfg, batch: int, seq: int, device: str | None) -> int:
    from perflab.memory.probe import measure_step_phases

    rep = measure_step_phases(cfg, batch=batch, seq=seq, dtype="fp32", optimizer="adamw", device=device)
    return max(r["peak_bytes"] for r in rep.rows if r["iteration"] == 2)


def check_step_peak(fn, device=None) -> Verdict:
    """Grade `fn(cfg, batch, seq) -> bytes`: the peak allocated bytes of a steady-state training
    step (fp32, torch's AdamW, loss = cross-entropy of fp32 logits) of `build_model(cfg)`, measured
    here, within `peak_tolerance(device)` (±5% on CPU, ±10% on GPU)."""
    cases = peak_cases(device)
    tol = peak_tolerance(device)
    name = "step peak, measured"
    if attempt(name, fn, what="the first shape", forbidden=_FORBIDDEN + (measured_peak,), **cases[0]) is NOT_DONE:
        return record(name, False)
    measured = [(c, measured_peak(device=device, **c)) for c in cases]
    for inputs, want in measured:
        got = attempt(name, fn, what=str(inputs), forbidden=_FORBIDDEN + (measured_peak,), **inputs)
        if abs(got - want) > tol * want:
            cfg = inputs["cfg"]
            raise fail(name,
                f"for {cfg.name} b={inputs['batch']} s={inputs['seq']} you predicted {got / 2**20:.1f} MiB, "
                f"the step measured {want / 2**20:.1f} MiB ({(got - want) / want:+.1%}; tolerance ±{tol:.0%}). "
                "Hint: weights + gradients + AdamW's two states are 16 bytes per parameter; activations are what the "
                "forward saves (section 4 of the lesson); and at the start of backward two fp32 b·s·V gradients of "
                "the loss live next to every activation.")
    shapes = ", ".join(f"{inputs['cfg'].name}: {want / 2**20:.1f} MiB" for inputs, want in measured)
    print(f"✓ {name}: within ±{tol:.0%} on {len(measured)} shapes ({shapes})")
    return record(name, True)


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
def reference_bytes_per_param(precision: str, optimizer: str, grad_dtype: str) -> float:
    return sum(bytes_per_param(precision, optimizer, grad_dtype).values())


def reference_zero(params: float, stage: int, dp: int) -> float:
    return sum(model_state_bytes(params, "mixed", "adamw", "fp16", stage, dp).values())


LEARNER_ANSWERS = ("bytes_per_param", "zero_bytes_per_gpu", "activation_bytes_per_layer", "predict_step_peak")
REFERENCES = {"bytes_per_param": reference_bytes_per_param, "zero_bytes_per_gpu": reference_zero,
              "activation_bytes_per_layer": activations_per_layer_bytes}
FORBIDDEN = _FORBIDDEN + (measured_peak,)
HELPERS = ("peak_cases", "peak_tolerance")


def grading_inputs(rng) -> dict[str, list[dict]]:
    from perflab.grading.checks import draw_int

    combos = [(p, o, g) for p in ("mixed", "fp32", "bf16") for o in ("adamw", "sgd", "lion") for g in ("fp32", "fp16", "bf16")]
    bpp = [dict(precision=p, optimizer=o, grad_dtype=g) for p, o, g in rng.sample(combos, 6)]
    zero = [dict(params=float(draw_int(rng, 10**5, 10**12)), stage=rng.randint(0, 3), dp=draw_int(rng, 1, 4096))
            for _ in range(8)]
    act = []
    for _ in range(5):
        a = draw_int(rng, 1, 128)
        act.append(dict(s=draw_int(rng, 1, 8192), b=draw_int(rng, 1, 64), h=a * draw_int(rng, 1, 256), a=a))
    return {"bytes_per_param": bpp, "zero_bytes_per_gpu": zero, "activation_bytes_per_layer": act}


def judge(answers, rng) -> None:
    """The lab's checks (the step peak against a measurement taken in this process), then the grading inputs."""
    from perflab.grading.checks import hidden

    drawn = grading_inputs(rng)
    for name, check in (("bytes_per_param", check_bytes_per_param), ("zero_bytes_per_gpu", check_zero),
                        ("activation_bytes_per_layer", check_activations)):
        if check(answers[name]):
            hidden(f"{name} on the grading inputs", answers[name], REFERENCES[name], drawn[name], rtol=1e-9)
    check_step_peak(answers["predict_step_peak"])
