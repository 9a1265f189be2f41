"""Lab 13's grader: the reference online-softmax update passes, each plausible mistake is rejected with its hint."""

import pytest

from perflab.core.grading import LabCheckError
from perflab.gemm import lab13

HINTS = {
    "acc_not_rescaled": "accumulator is not rescaled",
    "sum_not_rescaled": "running sum is not rescaled",
    "max_init_zero": "Start it at −inf",
    "causal_off_by_one": "causal mask off by one",
    "scale_1_over_d": "√d, not d",
    "fp16_accumulation": "fp32",
    "unmasked_tail": "padding in the last block",
}


def test_every_listed_mutant_has_a_test():
    assert set(HINTS) == set(lab13.MUTANTS)


def test_the_reference_solution_passes():
    assert lab13.grade(lab13.solution_init_state, lab13.solution_update)


@pytest.mark.parametrize("name", lab13.MUTANTS)
def test_each_mutant_is_rejected_with_its_hint(name):
    with pytest.raises(LabCheckError, match=HINTS[name]):
        lab13.grade(*lab13.mutant(name))


def test_a_stub_is_not_done_yet(capsys):
    def stub(*args, **kwargs):
        raise NotImplementedError

    assert not lab13.grade(stub, stub)
    assert "not done yet" in capsys.readouterr().out


def test_the_kernel_loop_matches_sdpa_on_an_odd_causal_length():
    case = dict(s=37, d=64, causal=True, dtype="fp16", block_m=16, block_n=16, kind="normal", seed=11)
    q, k, v = lab13.make_inputs(case)
    o = lab13.forward(lab13.solution_init_state, lab13.solution_update, q, k, v, causal=True, block_m=16, block_n=16)
    assert float((o - lab13.reference(q, k, v, True)).abs().max()) <= lab13.tolerance("fp16")
