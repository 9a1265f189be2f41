"""Lab 15: its checks accept the reference answers (and a better-than-greedy policy) and reject each
plausible mistake with a hint; the optimizer bytes graded against torch's tracker."""

from __future__ import annotations

import random

import pytest

from perflab.grading import checks as grading
from perflab.grading.checks import LabCheckError
from perflab.plan import lab15
from perflab.plan.recompute import OpChoice


def right_opt(params, gpus, fsdp):
    return 8 * params / (gpus if fsdp else 1)


OPT_MUTANTS = [
    (lambda params, gpus, fsdp: 16 * params / (gpus if fsdp else 1), "every model state"),
    (lambda params, gpus, fsdp: 4 * params / (gpus if fsdp else 1), "two moments"),
    (lambda params, gpus, fsdp: 8 * params, "1/gpus share"),
    (lambda params, gpus, fsdp: 8 * params / gpus, "full copy"),
    (lambda params, gpus, fsdp: 12 * params / (gpus if fsdp else 1), "AdamW's state alone"),
    (lambda params, gpus, fsdp: 8 * params / max(gpus - 1, 1) if fsdp else 8 * params, "count AdamW's state"),
]


def greedy(ops, need_bytes, n_blocks):
    order = sorted(ops, key=lambda o: o.bytes_per_block / o.seconds_per_block if o.seconds_per_block else 1e300,
                   reverse=True)
    return in_order(order, need_bytes, n_blocks)


def in_order(order, need_bytes, n_blocks):
    out, freed = [], 0
    for o in order:
        if freed >= need_bytes:
            break
        out.append(o.name)
        freed += o.bytes_per_block * n_blocks
    return out


def exact(ops, need_bytes, n_blocks):
    """An exact knapsack: the cheapest subset that frees enough (better than greedy is right too)."""
    from itertools import combinations

    best = None
    for k in range(len(ops) + 1):
        for sub in combinations(ops, k):
            if sum(o.bytes_per_block for o in sub) * n_blocks >= need_bytes:
                t = sum(o.seconds_per_block for o in sub)
                if best is None or t < best[0]:
                    best = (t, [o.name for o in sub])
    return best[1] if best else [o.name for o in ops]


POLICY_MUTANTS = [
    (lambda ops, need_bytes, n_blocks: in_order(sorted(ops, key=lambda o: -o.bytes_per_block), need_bytes, n_blocks),
     "biggest activations"),
    (lambda ops, need_bytes, n_blocks: greedy(ops, need_bytes, 1), "every block"),
    (lambda ops, need_bytes, n_blocks: [o.name for o in ops], "stop once enough is freed"),
    (lambda ops, need_bytes, n_blocks: greedy(ops, need_bytes, n_blocks)[:-1], "frees"),
    (lambda ops, need_bytes, n_blocks: "gelu", "list of operator names"),
    (lambda ops, need_bytes, n_blocks: ["relu"], "not an operator of the block"),
]


@pytest.fixture(autouse=True)
def fresh():
    grading.reset()


def test_the_references_pass_and_a_stub_is_not_done():
    assert lab15.check_optimizer_bytes(right_opt)
    assert lab15.check_recompute_policy(greedy)
    assert lab15.check_recompute_policy(exact)

    def stub(*a, **k):
        raise NotImplementedError

    assert lab15.check_optimizer_bytes(stub) is False
    assert lab15.check_recompute_policy(stub) is False


@pytest.mark.parametrize("mutant,hint", OPT_MUTANTS)
def test_each_optimizer_mistake_is_rejected_with_its_hint(mutant, hint):
    with pytest.raises(LabCheckError, match=hint):
        lab15.check_optimizer_bytes(mutant)


@pytest.mark.parametrize("mutant,hint", POLICY_MUTANTS)
def test_each_policy_mistake_is_rejected_with_its_hint(mutant, hint):
    with pytest.raises(LabCheckError, match=hint):
        lab15.check_recompute_policy(mutant)


def test_the_optimizer_bytes_are_graded_against_torchs_tracker():
    from perflab.plan.run import plan
    from perflab.workload.models import param_count, preset
    from tests.unit.plan.factories import tiny_gpt

    n = param_count(preset("tiny-gpt"))
    rows = []
    for g in (2, 4):
        p = plan(tiny_gpt, gpus=g, fsdp=True, dtype="fp32", suggest=False)
        rows.append({"params": n, "gpus": g, "fsdp": True, "optimizer_bytes": p.parts["optimizer state"]})
    assert lab15.check_optimizer_bytes(right_opt, rows)
    with pytest.raises(LabCheckError, match="vs torch's tracker"):
        lab15.check_optimizer_bytes(right_opt, [dict(rows[0], optimizer_bytes=rows[0]["optimizer_bytes"] * 1.5)])


def test_a_live_policy_is_graded_by_the_tracker_against_torchs_greedy_choice():
    ops = [OpChoice("gelu", 2_000, 1.0), OpChoice("norm", 1_500, 1.0), OpChoice("mm", 4_000, 10.0)]
    live = {"ops": ops, "need_bytes": 3_000, "n_blocks": 2}
    # the tracker says the greedy choice fits and an exact (cheaper by the estimate) choice does not
    tracker = {("gelu",): (True, 1e6), ("norm",): (False, 9e6)}
    with pytest.raises(LabCheckError, match="over the budget, where torch's greedy choice"):
        lab15.check_recompute_policy(lambda ops, need_bytes, n_blocks: ["norm"] if need_bytes == 3_000 else
                                     exact(ops, need_bytes, n_blocks),
                                     dict(live, fits=lambda names: tracker[tuple(sorted(names))]))
    grading.reset()
    assert lab15.check_recompute_policy(greedy, dict(live, fits=lambda names: tracker[tuple(sorted(names))]))
    # when the tracker finds neither fits, doing as well as torch's greedy choice passes
    grading.reset()
    assert lab15.check_recompute_policy(greedy, dict(live, fits=lambda names: (False, 9e6)))


def test_the_judge_grades_on_drawn_inputs_with_the_references():
    drawn = lab15.grading_inputs(random.Random(3))
    for case in drawn["recompute_policy"]:
        ops = lab15._ops(case["ops"])
        names = lab15.reference_recompute_policy(ops, case["need_bytes"], case["n_blocks"])
        freed, _ = lab15.policy_cost(names, ops, case["n_blocks"])
        assert freed >= case["need_bytes"]
    for inp in drawn["optimizer_bytes"]:
        assert lab15.reference_optimizer_bytes(**inp) == right_opt(**inp)
