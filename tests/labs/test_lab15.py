"""Lab 15: its checks accept the reference answers in either convention (FSDP2's 8 bytes of AdamW state per
parameter, ZeRO's K = 12) and every right recompute policy (a better-than-greedy one too, on the step's own
operators), reject each plausible mistake with a hint, and record every wrong answer in the summary; the
optimizer bytes graded against torch's tracker."""

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
    (lambda params, gpus, fsdp: 12 * params, "1/gpus share"),
    (lambda params, gpus, fsdp: 8 * params / max(gpus - 1, 1) if fsdp else 8 * params, "count the optimizer's state"),
]


def zero_opt(params, gpus, fsdp):
    """ZeRO's convention: K = 12 bytes per parameter, the fp32 master weights counted as optimizer state."""
    return 12 * params / (gpus if fsdp else 1)


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
    assert lab15.check_optimizer_bytes(zero_opt)  # ZeRO's K = 12 is right too
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
    rows = lab15.tracked_optimizer([2, 4])
    assert all(r["master_bytes"] == pytest.approx(r["optimizer_bytes"] / 2, rel=0.01) for r in rows)  # fp32 shards
    assert lab15.check_optimizer_bytes(right_opt, rows)
    grading.reset()
    assert lab15.check_optimizer_bytes(zero_opt, rows)  # against the state and the fp32 shards it keeps
    with pytest.raises(LabCheckError, match="vs torch's tracker"):
        lab15.check_optimizer_bytes(right_opt, [dict(rows[0], optimizer_bytes=rows[0]["optimizer_bytes"] * 1.5)])


def test_a_wrong_answer_is_counted_in_the_summary():
    """After a wrong answer the summary says so (it once said '1 of 1 checks passed')."""
    assert lab15.check_optimizer_bytes(right_opt)
    with pytest.raises(LabCheckError):
        lab15.check_recompute_policy(POLICY_MUTANTS[0][0])
    states = grading.summary()
    assert states["AdamW bytes per GPU"] == "passed" and states["recompute policy"] == "wrong"
    assert "1 of 2 checks passed" in states._repr_html_()


def test_an_exactly_optimal_policy_passes_on_the_step_whatever_the_tracker_says():
    """The live check grades the task (frees need_bytes at no more time than the greedy order), on the step's
    own operators; the tracker's peak is shown, and never fails a right answer."""
    # greedy takes gelu (2,000 B/s); an exact knapsack takes norm, which frees enough for less time
    ops = [OpChoice("gelu", 2_000, 1.0), OpChoice("norm", 1_500, 0.8), OpChoice("mm", 4_000, 10.0)]
    live = {"ops": ops, "need_bytes": 3_000, "n_blocks": 2, "budget_bytes": 5e6}
    seen = []

    def over(names):
        seen.append(sorted(names))
        return False, 9e6

    assert lab15.check_recompute_policy(exact, dict(live, fits=over))
    assert seen == [["norm"]]  # the exact knapsack's choice, applied to the step
    assert grading.summary()["recompute policy on the step"] == "passed"
    grading.reset()
    assert lab15.check_recompute_policy(greedy, dict(live, fits=lambda names: (True, 1e6)))
    grading.reset()
    # a policy that frees too little on the step's operators is wrong, and recorded so
    with pytest.raises(LabCheckError, match="on the step"):
        lab15.check_recompute_policy(lambda ops, need_bytes, n_blocks: exact(ops, need_bytes, n_blocks)
                                     if need_bytes != 3_000 else [], dict(live, fits=over))
    assert grading.summary()["recompute policy on the step"] == "wrong"


@pytest.mark.slow
def test_the_live_case_asks_for_a_policy_that_the_tracker_finds_within_the_budget():
    """The step's case: need_bytes is what a policy must free for what it keeps to fit the room above full
    recompute; torch's greedy choice of it, applied to the step, is planned by the tracker."""
    live = lab15.live_policy_case()
    ref = lab15.reference_recompute_policy(live["ops"], live["need_bytes"], live["n_blocks"])
    assert 0 < len(ref) <= len(live["ops"])
    fits, peak = live["fits"](ref)
    assert peak > 0 and fits


def test_the_judge_grades_on_drawn_inputs_with_the_references():
    drawn = lab15.grading_inputs(random.Random(3))
    for case in drawn["recompute_policy"]:
        ops = lab15._ops(case["ops"])
        names = lab15.reference_recompute_policy(ops, case["need_bytes"], case["n_blocks"])
        freed, _ = lab15.policy_cost(names, ops, case["n_blocks"])
        assert freed >= case["need_bytes"]
    for inp in drawn["optimizer_bytes"]:
        assert lab15.reference_optimizer_bytes(**inp) == right_opt(**inp)
    # a learner in ZeRO's convention is graded in it on the drawn inputs
    grading.reset()
    lab15.judge({"optimizer_bytes": zero_opt, "recompute_policy": greedy}, random.Random(3))
    assert set(grading._RESULTS.values()) == {"passed"}
