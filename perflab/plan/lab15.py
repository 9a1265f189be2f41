"""Checks for labs/15_at_scale.ipynb: AdamW's bytes per GPU, and a recompute policy that fits a budget.

1. `optimizer_bytes(params, gpus, fsdp)`: the bytes of optimizer state one GPU holds for AdamW, divided over
   the GPUs when FSDP shards them. Two conventions are right, and a learner keeps to one:
   * torch's and FSDP2's: the optimizer state is what `optimizer.state` holds, AdamW's two fp32 moments
     (`exp_avg`, `exp_avg_sq`): 8 bytes per parameter. The fp32 master weights are the parameters themselves
     (FSDP2 keeps fp32 shards and casts a bf16 copy of each unit it gathers).
   * ZeRO's (Rajbhandari et al., arXiv:1910.02054, §3.1): K = 12 bytes per parameter of "optimizer
     states", the fp32 master copy of the weights counted with the two moments, beside the 2 + 2 bytes of
     fp16 weights and gradients.
   Checked on closed-form cases, then against torch's tracker (`FSDPMemTracker`, the "optimizer state"
   part of `perflab plan`, plus the fp32 parameter shards for ZeRO's convention) for perflab's tiny GPT
   on 2, 4 and 8 GPUs (within 1 %: AdamW also keeps one step counter per parameter tensor).
2. `recompute_policy(ops, need_bytes, n_blocks)`: which operators to recompute (names from `ops`, the
   list torch's SAC estimator gives for one block: name, bytes its saved output frees, seconds its
   recompute costs) so that every block together frees at least `need_bytes`, at the least extra time.
   Any set is right that frees enough and costs no more time than torch's greedy order (memory freed
   per second of recompute, most first); a better set (an exact knapsack) is right too. Live, the
   learner's policy is checked on the step's own operators by the same rule, and then applied to the step:
   what torch's tracker sees is shown beside the budget, but does not decide (the estimate books each
   output as freed, the tracker sees what the policy's cache really keeps).

A wrong answer that matches a known mistake gets that mistake's hint; every wrong answer is recorded, so
the summary counts it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from perflab.grading.checks import NOT_DONE, attempt, fail, record
from perflab.plan.recompute import OpChoice, choose

OPT_MISTAKES: dict[str, tuple[Callable[[float, int, bool], float], str]] = {
    "16N": (lambda N, g, f: 16 * N / (g if f else 1), "that is every model state (weights, gradients and AdamW's; "
                                                         "2 + 2 + 12 in ZeRO's count, 4 + 4 + 8 in FSDP2's): the question "
                                                         "is the optimizer's state alone"),
    "4N": (lambda N, g, f: 4 * N / (g if f else 1), "AdamW keeps two moments per parameter (exp_avg and exp_avg_sq), "
                                                       "4 bytes each in fp32 (in mixed precision too)"),
    "not sharded": (lambda N, g, f: 8 * N, "with FSDP every GPU keeps only its 1/gpus share of the state"),
    "not sharded (ZeRO)": (lambda N, g, f: 12 * N, "with FSDP every GPU keeps only its 1/gpus share of the state"),
    "always sharded": (lambda N, g, f: 8 * N / g, "without FSDP (data parallel, DDP) every GPU keeps a full copy"),
    "always sharded (ZeRO)": (lambda N, g, f: 12 * N / g, "without FSDP (data parallel, DDP) every GPU keeps a full "
                                                          "copy"),
}
# the two right conventions (module docstring): bytes of optimizer state per parameter
CONVENTIONS = {8: "torch's and FSDP2's: AdamW's two fp32 moments, the fp32 weights are the parameters",
               12: "ZeRO's K = 12: the fp32 master weights counted with the two moments"}


def reference_optimizer_bytes(params: float, gpus: int, fsdp: bool) -> float:
    return 8 * params / (gpus if fsdp else 1)


def reference_optimizer_bytes_zero(params: float, gpus: int, fsdp: bool) -> float:
    """ZeRO's convention: K = 12 bytes per parameter (module docstring)."""
    return 12 * params / (gpus if fsdp else 1)


def convention_of(student) -> int | None:
    """8 or 12: the bytes per parameter of the convention the learner's answer follows (on a case that tells
    them apart), None when it follows neither."""
    try:
        got = float(student(params=1_000_000, gpus=4, fsdp=True))
    except Exception:  # noqa: BLE001 - a stub or a crash: the cases say which
        return None
    for k in CONVENTIONS:
        if math.isclose(got, k * 1_000_000 / 4, rel_tol=1e-9):
            return k
    return None


def _diagnose(student, cases) -> str | None:
    for _name, (wrong, hint) in OPT_MISTAKES.items():
        try:
            if all(math.isclose(float(student(**inp)), wrong(*inp.values()), rel_tol=1e-9) for inp, _ in cases):
                return hint
        except Exception:  # a mistake that raises is not this one
            continue
    return None


def _grade_numbers(name: str, student, cases: list[tuple[dict[str, Any], float]], rtol: float, general: str) -> bool:
    for inputs, want in cases:
        got: Any = attempt(name, student, what=str(inputs), **inputs)
        if got is NOT_DONE:
            return False
        try:
            good = math.isclose(float(got), float(want), rel_tol=rtol)
        except (TypeError, ValueError):
            raise fail(name, f"for {inputs} you returned {got!r}: return a number of bytes") from None
        if not good:
            hint = _diagnose(student, cases) or general
            raise fail(name, f"for {inputs} you returned {got!r}, expected {want:.6g}. Hint: {hint}")
    record(name, True)
    print(f"✓ {name}: correct on {len(cases)} cases")
    return True


def check_optimizer_bytes(student: Callable[[float, int, bool], float],
                          tracked: Sequence[dict[str, Any]] | None = None) -> bool:
    """Closed-form cases in the learner's convention (8 or 12 bytes per parameter, module docstring), then each
    `tracked` row ({params, gpus, fsdp, optimizer_bytes, master_bytes} from torch's tracker) within 1 %."""
    k = convention_of(student) or 8
    ref = reference_optimizer_bytes_zero if k == 12 else reference_optimizer_bytes
    cases = [({"params": N, "gpus": g, "fsdp": f}, ref(N, g, f))
             for N, g, f in ((1_000_000, 1, True), (544_256, 2, True), (8e9, 64, True), (8e9, 64, False),
                             (10**6, 3, True))]
    if not _grade_numbers("AdamW bytes per GPU", student, cases, 1e-9,
                          "count the optimizer's state per parameter (bytes each in fp32), then what FSDP divides by"):
        return False
    print(f"  (the convention you used: {k} bytes per parameter, {CONVENTIONS[k]})")
    if tracked:
        live = [({"params": r["params"], "gpus": r["gpus"], "fsdp": r["fsdp"]},
                 r["optimizer_bytes"] + (r["master_bytes"] if k == 12 else 0)) for r in tracked]
        _grade_numbers("AdamW bytes per GPU vs torch's tracker", student, live, 0.01,
                       "within 1 % of the optimizer state torch's tracker saw on each GPU"
                       + (" (with the fp32 weights it keeps as parameters, for ZeRO's convention)" if k == 12 else ""))
    return True


# ----------------------------------------------------------------------------- the recompute policy


def _ops(raw: Sequence[Any]) -> list[OpChoice]:
    return [o if isinstance(o, OpChoice) else OpChoice(str(o[0]), int(o[1]), float(o[2])) for o in raw]


def policy_cost(names: Sequence[str], ops: Sequence[OpChoice], n_blocks: int) -> tuple[float, float]:
    """(bytes freed, seconds of recompute) of recomputing `names` in every one of `n_blocks` blocks."""
    by = {o.name: o for o in ops}
    chosen = set(names)
    return (sum(by[n].bytes_per_block for n in chosen) * n_blocks,
            sum(by[n].seconds_per_block for n in chosen) * n_blocks)


def reference_recompute_policy(ops, need_bytes: float, n_blocks: int) -> list[str]:
    """torch's greedy order (memory freed per second of recompute, most first) until enough is freed."""
    order = sorted(_ops(ops), key=lambda o: o.bytes_per_second, reverse=True)
    return [o.name for o in choose(order, need_bytes, n_blocks)]


POLICY_MISTAKES: dict[str, tuple[Callable[[list[OpChoice], float, int], list[str]], str]] = {
    "biggest first": (lambda ops, need, n: [o.name for o in choose(sorted(ops, key=lambda o: -o.bytes_per_block), need, n)],
                      "the biggest activations are often the products' outputs, the dearest to recompute: rank by "
                      "bytes freed per second of recompute"),
    "cheapest first": (lambda ops, need, n: [o.name for o in choose(sorted(ops, key=lambda o: o.seconds_per_block),
                                                                    need, n)],
                       "the cheapest operators may free little: rank by bytes freed per second of recompute"),
    "one block": (lambda ops, need, n: reference_recompute_policy(ops, need, 1),
                  "a policy is applied in every block: each name frees its bytes n_blocks times"),
    "everything": (lambda ops, need, n: [o.name for o in ops], "recomputing everything fits, but costs the most: stop "
                                                               "once enough is freed"),
}


def _policy_hint(student, cases) -> str | None:
    """The hint of the known mistake the student's policy agrees with on every case, if one does."""
    for _name, (wrong, hint) in POLICY_MISTAKES.items():
        try:
            if all(sorted({str(x) for x in student(ops=list(o), need_bytes=nd, n_blocks=nb)})
                   == sorted(set(wrong(list(o), nd, nb))) for o, nd, nb in cases):
                return hint
        except Exception:  # a policy that raises on some case is not this mistake
            continue
    return None


def _check_policy_case(name: str, student, ops: list[OpChoice], need: float, n_blocks: int) -> bool | None:
    got: Any = attempt(name, student, what=f"need {need:.6g} bytes, {n_blocks} blocks", ops=list(ops),
                       need_bytes=need, n_blocks=n_blocks)
    if got is NOT_DONE:
        return None
    if isinstance(got, str) or not isinstance(got, (list, tuple, set, frozenset)):
        raise fail(name, f"return a list of operator names (got {type(got).__name__})")
    names = [str(x) for x in got]
    known = {o.name for o in ops}
    unknown = sorted(set(names) - known)
    if unknown:
        raise fail(name, f"{', '.join(unknown)} is not an operator of the block: choose names from ops")
    freed, secs = policy_cost(names, ops, n_blocks)
    _, best = policy_cost(reference_recompute_policy(ops, need, n_blocks), ops, n_blocks)
    enough = sum(o.bytes_per_block for o in ops) * n_blocks >= need
    if (enough and freed < need) or secs > best * (1 + 1e-9) + 1e-15:
        hint = _policy_hint(student, [(ops, need, n_blocks)] + [(_ops(r), nd, nb) for r, nd, nb in POLICY_CASES])
        why = (f"it frees {freed:.6g} bytes of the {need:.6g} needed" if enough and freed < need else
               f"it costs {secs:.3g} s of recompute where {best:.3g} s is enough")
        raise fail(name, f"your policy {sorted(set(names))}: {why}. Hint: "
                   + (hint or "free at least what is needed, choosing by bytes freed per second of recompute"))
    return True


POLICY_CASES = [  # (ops: name, bytes per block, seconds per block; need; blocks)
    ([("gelu", 2_000, 1.0), ("norm", 1_000, 1.0), ("add", 500, 1.0), ("mm", 4_000, 10.0)], 5_000, 2),
    ([("gelu", 2_000, 1.0), ("norm", 1_000, 1.0), ("add", 500, 1.0), ("mm", 4_000, 10.0)], 12_000, 2),
    ([("silu", 8_000, 2.0), ("mul", 8_000, 2.0), ("rms_norm", 2_000, 0.5), ("mm", 16_000, 40.0)], 30_000, 2),
    ([("gelu", 100, 1.0), ("mm", 10_000, 5.0)], 9_000, 1),
    ([("gelu", 2_000, 1.0), ("mm", 4_000, 10.0)], 0, 4),
]


def check_recompute_policy(student, live: dict[str, Any] | None = None) -> bool:
    """The cases above, then (with `live`: {ops, need_bytes, n_blocks, fits(names) -> (fits, peak_bytes),
    budget_bytes}) the step's own operators by the same rule (frees enough at no more time than torch's
    greedy order); the policy is then applied to the step and torch's tracker's peak shown beside the
    budget, without deciding: the task is the estimate's knapsack, which the tracker can disagree with."""
    name = "recompute policy"
    for raw, need, n in POLICY_CASES:
        if _check_policy_case(name, student, _ops(raw), need, n) is None:
            return False
    record(name, True)
    print(f"✓ {name}: frees enough at no more time than torch's greedy order on {len(POLICY_CASES)} cases")
    if live:
        ops = _ops(live["ops"])
        on_step = name + " on the step"
        if _check_policy_case(on_step, student, ops, live["need_bytes"], live["n_blocks"]) is None:
            return False
        names = list(student(ops=ops, need_bytes=live["need_bytes"], n_blocks=live["n_blocks"]))
        freed, secs = policy_cost(names, ops, live["n_blocks"])
        record(on_step, True)
        print(f"✓ {on_step}: frees {freed / 1e6:.3g} MB of the {live['need_bytes'] / 1e6:.3g} MB needed, for "
              f"{secs * 1e6:.3g} µs of recompute per step")
        fits, peak = live["fits"](names)
        budget = live.get("budget_bytes")
        where = f"the budget of {budget / 1e6:.3g} MB" if budget else "the budget"
        print(f"  applied to the step, torch's tracker sees a peak of {peak / 1e6:.3g} MB: "
              + (f"within {where}" if fits else f"over {where}: the estimate books each operator's output as freed, "
                 "while the policy's cache keeps the outputs of the operators it saves, and an input another saved "
                 "operator reads stays alive. `perflab plan --ac auto` checks each policy with the tracker and saves "
                 "one operator fewer until it fits"))
    return True


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
LEARNER_ANSWERS = ("optimizer_bytes", "recompute_policy")
REFERENCES = {"optimizer_bytes": reference_optimizer_bytes, "recompute_policy": reference_recompute_policy}
# ZeRO's convention is right too (module docstring): the judge grades a learner in the convention it follows


def _forbidden() -> tuple:
    """What computes this lab's answers, disarmed in the grader's worker: the planner's recompute choice
    and the step it plans (whose "optimizer state" is optimizer_bytes' answer), the memory lesson's
    bytes per parameter, lab 12's model-state bytes (twice this lab's), and torch's trackers and SAC
    estimator, which the answers are checked against (its greedy order is recompute_policy's answer).
    `OpChoice` stays whole: the operators reach the learner as OpChoice objects. Lab 12's answer is named
    (module, function), not imported: a topic does not import another topic's lab."""
    import importlib

    from perflab.memory import estimate
    from perflab.plan import recompute, run, step

    tools = []  # the classes, not their modules: the modules' enums and helpers serve torch itself
    for module, name in (("sac_estimator", "SACEstimator"), ("mem_tracker", "MemTracker"),
                         ("fsdp2_mem_tracker", "FSDPMemTracker"), ("runtime_estimator", "RuntimeEstimator")):
        try:
            tools.append(getattr(importlib.import_module(f"torch.distributed._tools.{module}"), name))
        except Exception:  # noqa: BLE001 - a torch without it: nothing of it to call
            continue
    return (reference_optimizer_bytes_zero, recompute.choose, recompute.greedy_order, recompute.need_for_room,
            run.plan, run._one, run._auto, run._suggestions, step.run_step, step._run, estimate.bytes_per_param, estimate.optimizer_of, estimate.model_state_bytes, estimate.estimate,
            estimate.step_phases, ("perflab.shard.lab12", "reference_fsdp_bytes"), *tools)


FORBIDDEN = _forbidden()


def grading_inputs(rng) -> dict[str, list[dict]]:
    from perflab.grading.checks import draw_int

    opt = [dict(params=draw_int(rng, 10**3, 10**11), gpus=draw_int(rng, 1, 4096), fsdp=rng.random() < 0.7)
           for _ in range(6)]
    pol = []
    for _ in range(4):
        k = draw_int(rng, 2, 8)
        ops = [(f"op{i}", draw_int(rng, 10, 10**7), rng.uniform(1e-7, 1e-3)) for i in range(k)]
        n = draw_int(rng, 1, 96)
        total = sum(o[1] for o in ops) * n
        pol.append(dict(ops=ops, need_bytes=rng.uniform(0.05, 0.95) * total, n_blocks=n))
    return {"optimizer_bytes": opt, "recompute_policy": pol}


def judge(answers, rng) -> None:
    from perflab.grading.checks import hidden

    drawn = grading_inputs(rng)
    if check_optimizer_bytes(answers["optimizer_bytes"]):
        ref = reference_optimizer_bytes_zero if convention_of(answers["optimizer_bytes"]) == 12 else \
            reference_optimizer_bytes
        hidden("optimizer_bytes on the grading inputs", answers["optimizer_bytes"], ref, drawn["optimizer_bytes"])
    if check_recompute_policy(answers["recompute_policy"]):
        name = "recompute_policy on the grading inputs"
        for case in drawn["recompute_policy"]:
            if _check_policy_case(name, answers["recompute_policy"], _ops(case["ops"]), case["need_bytes"],
                                  case["n_blocks"]) is None:
                return
        record(name, True)


# --- the lab's live cases: torch's tracker on a fake cluster -----------------------------------------
def tracked_optimizer(gpus: Sequence[int]) -> list[dict[str, Any]]:
    """perflab's tiny GPT (2 × 32 tokens, fp32) planned with FSDP on each cluster size: the optimizer state
    torch's FSDPMemTracker saw on one GPU at the optimizer step, and the fp32 parameter shard it keeps
    there (ZeRO's master weights)."""
    from perflab.plan.run import plan, preset_target
    from perflab.workload.models import param_count, preset

    n = param_count(preset("tiny-gpt"))
    build = preset_target("tiny-gpt", 2, 32)
    rows = []
    for g in gpus:
        p = plan(build, gpus=g, fsdp=True, dtype="fp32", suggest=False)
        st = p.phases["optimizer"]
        rows.append({"params": n, "gpus": g, "fsdp": True, "optimizer_bytes": st["optimizer state"],
                     "master_bytes": st["parameters"]})
    return rows


def live_policy_case(gpus: int = 2) -> dict[str, Any]:
    """The tiny GPT at 8 × 128 tokens with FSDP on `gpus` GPUs and a budget between its peaks with no
    recompute and with every block recomputed: the SAC estimator's operators, the bytes a policy must free
    for what it saves to fit above full recompute (`perflab.plan.recompute.need_for_room`), and
    `fits(names)`, which plans the step with `names` recomputed and returns (fits, peak bytes) from torch's
    tracker."""
    from perflab.plan.cost import cluster
    from perflab.plan.recompute import greedy_order, need_for_room
    from perflab.plan.run import _one, plan, preset_target
    from perflab.plan.step import Layout

    build = preset_target("tiny-gpt", 8, 128)
    c = cluster("h100")
    none = plan(build, gpus=gpus, fsdp=True, dtype="fp32", suggest=False)
    full = plan(build, gpus=gpus, fsdp=True, dtype="fp32", ac="full", suggest=False)
    budget = 0.3 * none.peak_bytes + 0.7 * full.peak_bytes
    layout = Layout(gpus, fsdp=True, dtype="fp32", ac="auto")
    ops, n_blocks = greedy_order(build, layout, c)

    def fits(names: Sequence[str]) -> tuple[bool, int]:
        _, p = _one(build, layout, c, 0.1, frozenset(names), budget)
        return p.fits, p.peak_bytes

    step_peak = sum(full.phases["step"].values())  # what a policy changes: the forward and backward's peak
    return {"ops": ops, "need_bytes": need_for_room(ops, budget - step_peak, n_blocks), "n_blocks": n_blocks,
            "fits": fits, "budget_bytes": budget}
