"""Checks for lab 02 (MFU of a step you measure). Each raises `LabCheckError` on a wrong answer and
says kindly when a function is still a stub.

Published cases the checks use (see perflab/flops/data/published_runs.json for sources): PaLM 540B
(238.3K tokens/s, 6144 TPU v4 at 275 TFLOP/s, MFU 46.2%), MT-NLG 530B as PaLM computes it (30.2%),
and Megatron-LM's 175B benchmark (Korthikanti et al. 2022 Table 5: 13.75 s per iteration, 51.4%).
"""

from __future__ import annotations

import math
from typing import Any

from perflab.core.errors import PerflabError
from perflab.grading.checks import NOT_DONE, Verdict, attempt, fail, grade, record


def _palm(n_params, layers, heads, head_dim, seq):
    return 6 * n_params + 12 * layers * heads * head_dim * seq


PALM_MISTAKES = [
    ("the attention term is missing: 6N alone leaves out the scores and values matmuls (12·L·H·Q·T)",
     lambda n_params, layers, heads, head_dim, seq: 6 * n_params),
    ("you counted the forward alone (2N + 4·L·H·Q·T): a training step adds a backward of twice the forward",
     lambda n_params, layers, heads, head_dim, seq: 2 * n_params + 4 * layers * heads * head_dim * seq),
    ("the attention term counts the forward only (4·L·H·Q·T): with the backward it is 12·L·H·Q·T",
     lambda n_params, layers, heads, head_dim, seq: 6 * n_params + 4 * layers * heads * head_dim * seq),
    ("the attention term is 12·L·H·Q·T, not 6·L·H·Q·T: two matmuls (scores and values) × 2 FLOPs × 3 for the backward",
     lambda n_params, layers, heads, head_dim, seq: 6 * n_params + 6 * layers * heads * head_dim * seq),
    ("you counted the attention term with seq² (the per-sequence cost): per token it grows with seq, not seq²",
     lambda n_params, layers, heads, head_dim, seq: 6 * n_params + 12 * layers * heads * head_dim * seq * seq),
]


def _mfu(tokens_per_s, flops_per_token, n_devices, peak_tflops):
    return tokens_per_s * flops_per_token / (n_devices * peak_tflops * 1e12)


MFU_MISTAKES = [
    ("that is a percentage: return a fraction (0.462, not 46.2)", lambda **kw: 100 * _mfu(**kw)),
    ("the peak is in TFLOP/s: multiply it by 1e12 to compare with FLOP/s",
     lambda tokens_per_s, flops_per_token, n_devices, peak_tflops: tokens_per_s * flops_per_token / (n_devices * peak_tflops)),
    ("the peak is per device: divide by n_devices × peak (you left out the device count)",
     lambda tokens_per_s, flops_per_token, n_devices, peak_tflops: tokens_per_s * flops_per_token / (peak_tflops * 1e12)),
    ("you multiplied by n_devices: the run's achieved FLOP/s is shared by all devices, so divide",
     lambda tokens_per_s, flops_per_token, n_devices, peak_tflops: tokens_per_s * flops_per_token * n_devices / (peak_tflops * 1e12)),
    ("you used 6 FLOPs per token instead of the FLOPs per token given",
     lambda tokens_per_s, flops_per_token, n_devices, peak_tflops: tokens_per_s * 6 / (n_devices * peak_tflops * 1e12)),
]


def _palm_case(run_id: str) -> dict[str, Any]:
    from perflab.flops.mfu import published_runs

    return next(r for r in published_runs() if r["id"] == run_id)


def check_palm_flops(student) -> Verdict:
    """`student(n_params, layers, heads, head_dim, seq)` → PaLM's model FLOPs per token, 6N + 12·L·H·Q·T."""
    from perflab.flops.transformer import palm_flops_per_token, palm_params
    from perflab.workload.models import preset

    cases = []
    for rid in ("palm-540b", "mt-nlg-530b-palm"):
        x = _palm_case(rid)["inputs"]
        args = dict(n_params=x["n_params"], layers=x["layers"], heads=x["heads"], head_dim=x["head_dim"], seq=x["seq"])
        cases.append((args, palm_flops_per_token(**args)))
    cfg = preset("tiny-llama")
    args = dict(n_params=palm_params(cfg), layers=cfg.layers, heads=cfg.heads, head_dim=cfg.d_head, seq=cfg.seq_len)
    cases.append((args, palm_flops_per_token(**args)))
    cases.append((dict(n_params=1_000_003, layers=3, heads=5, head_dim=7, seq=1), palm_flops_per_token(1_000_003, 3, 5, 7, 1)))
    return grade("PaLM FLOPs per token", student, cases, rtol=1e-9, mistakes=PALM_MISTAKES, reference=_palm,
                 forbidden=[palm_flops_per_token],
                 hint="6 FLOPs per parameter per token, plus the attention term 12 × layers × heads × head size × sequence length")


def check_mfu(student) -> Verdict:
    """`student(tokens_per_s, flops_per_token, n_devices, peak_tflops)` → MFU as a fraction (0.462, not 46.2).

    Graded on PaLM 540B and MT-NLG 530B (PaLM §4.1) and Megatron's 175B run (Korthikanti et al. Table 5),
    each against perflab's value and the published figure."""
    from perflab.flops.mfu import mfu, printed
    from perflab.flops.transformer import korthikanti_eq7, palm_flops_per_token

    cases, published = [], []
    for rid in ("palm-540b", "mt-nlg-530b-palm"):
        run = _palm_case(rid)
        x = run["inputs"]
        f = palm_flops_per_token(x["n_params"], x["layers"], x["heads"], x["head_dim"], x["seq"])
        args = dict(tokens_per_s=x["tokens_per_s"], flops_per_token=f, n_devices=x["devices"], peak_tflops=x["peak_tflops"])
        cases.append((args, mfu(x["tokens_per_s"], f, x["peak_tflops"], x["devices"])))
        published.append((args, run["published"]["mfu"], "truncate"))
    k = _palm_case("korthikanti-175b")["inputs"]
    tokens = k["batch"] * k["seq"]
    f = korthikanti_eq7(k["batch"], k["seq"], k["layers"], k["hidden"], k["vocab"]) / tokens
    args = dict(tokens_per_s=tokens / k["iteration_s"], flops_per_token=f, n_devices=k["devices"], peak_tflops=k["peak_tflops"])
    cases.append((args, mfu(args["tokens_per_s"], f, k["peak_tflops"], k["devices"])))
    published.append((args, 0.514, "round"))
    cases.append((dict(tokens_per_s=1234.5, flops_per_token=6e6, n_devices=3, peak_tflops=0.5), _mfu(1234.5, 6e6, 3, 0.5)))
    ok = grade("MFU from throughput", student, cases, rtol=1e-6, mistakes=MFU_MISTAKES, reference=_mfu, forbidden=[mfu],
               hint="achieved FLOP/s = tokens/s × FLOPs per token; divide by n_devices × peak TFLOP/s × 1e12; return a fraction")
    if ok:
        for args, pub, how in published:
            got = student(**args)
            if printed(got, 3, how) != pub:
                raise fail("MFU from throughput", f"{args} gives {got:.4f}, the paper prints {pub}")
        print("  … and it reproduces PaLM's 46.2%, MT-NLG's 30.2% and Megatron 175B's 51.4%")
    return ok


def check_tokens_per_second(student, model: str = "tiny-gpt", batch: int = 4, seq: int = 64, steps: int = 3,
                            device=None, tolerance: float = 3.0) -> Verdict:
    """`student(model, batch, seq, steps, device)` → tokens/s of full training steps (forward, backward,
    optimizer) that the learner timed. Graded against perflab's own measurement of the same step: at
    most 2× perflab's fastest step (a forward-only timing, or a GPU timing without synchronisation,
    comes out several times faster) and at least 1/`tolerance` of its typical one."""
    from perflab.flops.step import grad_accum_sweep, measure_step
    from perflab.workload.models import preset

    name = "tokens/s of a training step"
    got = attempt(name, student, what="the lab's model", forbidden=[measure_step, grad_accum_sweep], model=model, batch=batch, seq=seq,
                  steps=steps, device=device)
    if got is NOT_DONE:
        return record(name, False)
    if not isinstance(got, (int, float)) or isinstance(got, bool) or not math.isfinite(got) or got <= 0:
        raise fail(name, f"expected a positive number of tokens per second, got {got!r}")
    # Timings on a shared machine are noisy, and noise only ever slows a step down. So the learner's
    # number may not exceed perflab's *best* step by much (that would mean work was skipped), and may
    # not fall below perflab's typical step by more than `tolerance`. Both are measured again when
    # the comparison fails, up to four times.
    best = 0.0
    ratios = []
    for round_ in range(4):
        if round_:
            got = student(model=model, batch=batch, seq=seq, steps=steps, device=device)
        ref = measure_step(preset(model), batch=batch, seq=seq, steps=max(steps, 4), warmup=1, device=device,
                           ceiling=False, verify=False)
        best = max(best, ref.tokens_per_step / min(ref.step_times_s))
        ratios.append(got / ref.tokens_per_s)
        if got <= 2 * best and ratios[-1] >= 1 / tolerance:
            print(f"✓ {name}: {got:,.0f} tokens/s, perflab measured {ref.tokens_per_s:,.0f} (median step; best {best:,.0f})")
            return record(name, True)
    too_fast = got > 2 * best
    hint = ("much faster than perflab's fastest step: did you time the backward and the optimizer step, and wait "
            "for the GPU (torch.cuda.synchronize()) before reading the clock?" if too_fast else
            "much slower than perflab: did you leave the first (warm-up) step out of the timing, and count tokens as batch × seq per step?")
    raise fail(name, f"ratios to perflab's measurement {', '.join(f'{r:.2g}' for r in ratios)}. Hint: {hint}")


def check_step_mfu(value, *, tokens_per_s: float, model: str, seq: int, peak_tflops: float,
                   kind: str = "mfu", checkpointing: bool = False) -> Verdict:
    """The learner's MFU (kind='mfu') or HFU (kind='hfu') of their own step, from their tokens/s.

    MFU must use model FLOPs (forward + backward, perflab's exact count); HFU the hardware FLOPs of
    the step they ran (recompute included)."""
    from perflab.flops.transformer import exact_flops
    from perflab.workload.models import preset

    name = f"{kind.upper()} of your step"
    if value is None or value is Ellipsis:
        print(f"… {name}: not done yet — compute it and run this cell again.")
        return record(name, False)
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise fail(name, f"expected a number (a fraction such as 0.05), got {value!r}") from None
    try:
        ex = exact_flops(preset(model), 1, seq, checkpointing=checkpointing)
    except PerflabError as e:
        raise fail(name, str(e)) from None
    model_f, hw_f = ex.model / seq, ex.hardware / seq
    want = tokens_per_s * (model_f if kind == "mfu" else hw_f) / (peak_tflops * 1e12)
    if math.isclose(v, want, rel_tol=1e-3):
        print(f"✓ {name}: {v:.2%}")
        return record(name, True)
    other = tokens_per_s * (hw_f if kind == "mfu" else model_f) / (peak_tflops * 1e12)
    if math.isclose(v, 100 * want, rel_tol=1e-3):
        hint = "return a fraction, not a percentage"
    elif math.isclose(v, other, rel_tol=1e-3):
        hint = ("that is the HFU: MFU counts model FLOPs only (no recomputation)" if kind == "mfu" else
                "that is the MFU: HFU counts the recomputed FLOPs too (exact_flops(...).hardware)")
    elif math.isclose(v, want / 3, rel_tol=1e-3):
        hint = "that counts the forward's FLOPs only: a training step is forward + backward, about 3× the forward"
    elif math.isclose(v, want * peak_tflops, rel_tol=1e-3):
        hint = "the peak is missing from the denominator: divide by peak TFLOP/s × 1e12"
    else:
        hint = f"expected {want:.4g} from tokens/s × FLOPs per token / (peak × 1e12)"
    raise fail(name, f"you computed {v:.4g}. Hint: {hint}")


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
LEARNER_ANSWERS = ("palm_flops_per_token", "mfu", "tokens_per_second")


def reference_palm(n_params, layers, heads, head_dim, seq):
    from perflab.flops.transformer import palm_flops_per_token

    return palm_flops_per_token(n_params, layers, heads, head_dim, seq)


REFERENCES = {"palm_flops_per_token": reference_palm, "mfu": _mfu}


def _forbidden() -> tuple:
    from perflab.flops import mfu
    from perflab.flops.step import grad_accum_sweep, measure_step
    from perflab.flops.transformer import palm_flops_per_token

    return (palm_flops_per_token, mfu.mfu, measure_step, grad_accum_sweep)


FORBIDDEN = _forbidden()


def grading_inputs(rng) -> dict[str, list[dict]]:
    from perflab.grading.checks import draw_int

    palm = [dict(n_params=draw_int(rng, 10**5, 10**12), layers=draw_int(rng, 1, 128), heads=draw_int(rng, 1, 128),
                 head_dim=draw_int(rng, 8, 256), seq=draw_int(rng, 1, 32768)) for _ in range(5)]
    mfus = [dict(tokens_per_s=rng.uniform(1, 1e7), flops_per_token=rng.uniform(1e6, 1e13), n_devices=draw_int(rng, 1, 8192),
                 peak_tflops=rng.uniform(10, 2000)) for _ in range(5)]
    return {"palm_flops_per_token": palm, "mfu": mfus}


def judge(answers, rng, *, model: str = "tiny-gpt", batch: int = 4, seq: int = 64, steps: int = 3) -> None:
    """The formulas on the lab's cases and the grading inputs; the learner's tokens/s timed by their
    function in its own process against perflab's measurement taken here; the step's MFU and HFU
    through the learner's `mfu` with that tokens/s (a sped-up clock in the learner's process gives a
    tokens/s that perflab's own measurement refutes)."""
    from perflab.flops.transformer import exact_flops
    from perflab.grading.checks import hidden
    from perflab.workload.models import preset

    drawn = grading_inputs(rng)
    for name, check in (("palm_flops_per_token", check_palm_flops), ("mfu", check_mfu)):
        if check(answers[name]):
            hidden(f"{name} on the grading inputs", answers[name], REFERENCES[name], drawn[name], rtol=1e-9)
    tps = answers["tokens_per_second"]
    if not check_tokens_per_second(tps, model=model, batch=batch, seq=seq, steps=steps, device="cpu"):
        return
    got = float(tps(model=model, batch=batch, seq=seq, steps=steps, device="cpu"))
    ex = exact_flops(preset(model), 1, seq)
    peak = 1.0
    try:
        mine = answers["mfu"](got, ex.model / seq, 1, peak)
        mine_hw = answers["mfu"](got, ex.hardware / seq, 1, peak)
    except NotImplementedError:
        return
    check_step_mfu(mine, tokens_per_s=got, model=model, seq=seq, peak_tflops=peak)
    check_step_mfu(mine_hw, tokens_per_s=got, model=model, seq=seq, peak_tflops=peak, kind="hfu")
