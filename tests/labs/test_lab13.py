"""Lab 13's grader: the reference online-softmax update passes, each plausible mistake is rejected with its hint."""

import functools
import math
from collections.abc import Callable
from typing import Any

import pytest

from perflab.attention import lab13
from perflab.grading.checks import LabCheckError

# The reference solution and its mutants: kept here, not in the package, so the learners' release holds no answer.


def solution_init_state(rows: int, d: int):
    import torch

    return (torch.full((rows,), -math.inf), torch.zeros(rows), torch.zeros(rows, d))


def solution_update(q, k, v, m, lsum, acc, *, q_start, k_start, seq_len, causal, _mutant: str = ""):
    import torch

    d = q.shape[-1]
    scale = 1 / d if _mutant == "scale_1_over_d" else 1 / math.sqrt(d)
    s = (q.float() @ k.float().T) * scale
    cols = k_start + torch.arange(k.shape[0])
    keep = (
        (cols < seq_len)[None, :]
        if _mutant != "unmasked_tail"
        else torch.ones(1, k.shape[0], dtype=torch.bool)
    )
    if causal:
        rows = q_start + torch.arange(q.shape[0])
        keep = keep & (
            (rows[:, None] > cols[None, :])
            if _mutant == "causal_off_by_one"
            else (rows[:, None] >= cols[None, :])
        )
    s = s.masked_fill(~keep, -math.inf)
    if _mutant != "v_padding_not_zeroed":  # the kernel loads V's padding as 0 (other=0.0)
        v = v.masked_fill(~(cols < seq_len)[:, None], 0)
    m_new = torch.maximum(m, s.max(-1).values)
    safe = (
        m_new
        if _mutant == "no_inf_guard"
        else torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
    )  # a row with nothing seen yet
    alpha = torch.exp(m - safe)
    p = torch.exp(s - safe[:, None])
    l_new = (lsum if _mutant == "sum_not_rescaled" else lsum * alpha) + p.sum(-1)
    pv = (p if _mutant == "p_not_rounded" else p.to(v.dtype)).float() @ v.float()
    if _mutant == "fp16_accumulation":
        acc_new = (acc.half() * alpha.half()[:, None] + pv.half()).float()
        l_new = (lsum.half() * alpha.half() + p.sum(-1).half()).float()
    elif _mutant == "acc_not_rescaled":
        acc_new = acc + pv
    else:
        acc_new = acc * alpha[:, None] + pv
    return m_new, l_new, acc_new


MUTANTS = (
    "acc_not_rescaled",
    "sum_not_rescaled",
    "max_init_zero",
    "causal_off_by_one",
    "scale_1_over_d",
    "fp16_accumulation",
    "unmasked_tail",
    "no_inf_guard",
    "v_padding_not_zeroed",
    "p_not_rounded",
)


def mutant(name: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(init_state, update) with one plausible mistake."""

    import torch

    if name == "max_init_zero":
        return (
            lambda rows, d: (torch.zeros(rows), torch.zeros(rows), torch.zeros(rows, d))
        ), solution_update
    return solution_init_state, functools.partial(solution_update, _mutant=name)


HINTS = {
    "acc_not_rescaled": "accumulator is not rescaled",
    "sum_not_rescaled": "running sum is not rescaled",
    "max_init_zero": "Start it at −inf",
    "causal_off_by_one": "causal mask off by one",
    "scale_1_over_d": "√d, not d",
    "fp16_accumulation": "fp32",
    "unmasked_tail": "padding in the last block",
    "no_inf_guard": "Guard it",
    "v_padding_not_zeroed": "zero those rows of V",
    "p_not_rounded": "P is not rounded to V's dtype",
}


def test_every_listed_mutant_has_a_test():
    assert set(HINTS) == set(MUTANTS)


def test_the_reference_solution_passes():
    assert lab13.check_online_softmax(solution_init_state, solution_update)


@pytest.mark.parametrize("name", MUTANTS)
def test_each_mutant_is_rejected_with_its_hint(name):
    with pytest.raises(LabCheckError, match=HINTS[name]):
        lab13.check_online_softmax(*mutant(name))


def test_a_stub_is_not_done_yet(capsys):
    def stub(*args, **kwargs):
        raise NotImplementedError

    assert not lab13.check_online_softmax(stub, stub)
    assert "not done yet" in capsys.readouterr().out


def test_the_kernel_loop_matches_sdpa_on_an_odd_causal_length():
    case = dict(
        s=37, d=64, causal=True, dtype="fp16", block_m=16, block_n=16, kind="normal", seed=11
    )
    q, k, v = lab13.make_inputs(case)
    o = lab13.forward(
        solution_init_state, solution_update, q, k, v, causal=True, block_m=16, block_n=16
    )
    assert float((o - lab13.reference(q, k, v, True)).abs().max()) <= lab13.tolerance("fp16")


@pytest.mark.parametrize("name", ["no_inf_guard", "v_padding_not_zeroed"])
def test_the_hidden_cases_alone_reject_the_silent_mistakes(name):
    """Without the probes (as a learner who games them would meet the grader), the hidden cases still
    fail each: blocks fed last to first (a fully masked block first), and NaN and inf in V's padding.
    (Not rounding P is closer to SDPA, not further: only its probe can name it.)"""
    with pytest.raises(LabCheckError, match="hidden case"):
        lab13.check_online_softmax(*mutant(name), probes=False)


def test_blocks_fed_in_either_order_match_sdpa():
    case = dict(s=61, d=64, causal=True, dtype="bf16", block_m=32, block_n=16, kind="normal", seed=6)
    q, k, v = lab13.make_inputs(case)
    ref = lab13.reference(q, k, v, True)
    for order in ("forward", "reverse"):
        o = lab13.forward(solution_init_state, solution_update, q, k, v, causal=True, block_m=32, block_n=16,
                          order=order)
        assert float((o - ref).abs().max()) <= lab13.tolerance("bf16"), order
