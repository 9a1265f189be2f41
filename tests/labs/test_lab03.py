"""Lab 03: its checks accept the reference answer and reject each plausible mistake with a hint."""

import pytest

from perflab.grading import checks as grading
from perflab.grading.checks import LabCheckError
from perflab.memory import lab03 as lab
from perflab.memory.estimate import step_phases
from perflab.workload.models import param_count


def _solution_peak(cfg, batch, seq, transient=True):
    """The solution notebook's predict_step_peak, written out."""
    n_tok, h, f, v = batch * seq, cfg.hidden, cfg.d_ff, cfg.vocab
    p = param_count(cfg)
    per_layer = 4 * n_tok * (2 * h + 2 * h + 4 * h + 2 * f)
    activations = cfg.layers * per_layer + 4 * n_tok * 2 * h + 4 * n_tok * v
    start_of_backward = 12 * p + activations + (2 * 4 * n_tok * v if transient else 0)
    return max(start_of_backward, 16 * p)


def bytes_per_param(precision, optimizer, grad_dtype):
    weights = {"fp32": 4, "mixed": 2 + 4, "bf16": 2}[precision]
    grads = {"fp32": 4, "bf16": 2, "fp16": 2}[grad_dtype]
    state = 2 if precision == "bf16" else 4
    return weights + grads + {"adamw": 2, "sgd": 1, "lion": 1}[optimizer] * state


def zero(params, stage, dp):
    weights, grads, optim = 2 * params, 2 * params, 12 * params
    if stage >= 1:
        optim /= dp
    if stage >= 2:
        grads /= dp
    if stage >= 3:
        weights /= dp
    return weights + grads + optim


def activations(s, b, h, a):
    return s * b * h * (34 + 5 * a * s / h)


def bpp_no_master(precision, optimizer, grad_dtype):  # a missing term
    return bytes_per_param(precision, optimizer, grad_dtype) - (4 if precision == "mixed" else 0)


def bpp_bf16_states_fp32(precision, optimizer, grad_dtype):  # wrong convention
    return bytes_per_param(precision, optimizer, grad_dtype) + (2 * {"adamw": 2, "sgd": 1, "lion": 1}[optimizer]
                                                                if precision == "bf16" else 0)


def bpp_ignores_optimizer(precision, optimizer, grad_dtype):  # ignores an input
    return bytes_per_param(precision, "adamw", grad_dtype)


def zero_off_by_one_stage(params, stage, dp):  # off by one
    return zero(params, min(stage + 1, 3), dp)


def zero_ignores_dp(params, stage, dp):  # ignores an input
    return zero(params, stage, 8)


def zero_master_not_partitioned(params, stage, dp):  # the ZeRO paper's K misread
    return zero(params, stage, dp) + (4 * params - 4 * params / dp if stage >= 1 else 0)


def act_no_scores(s, b, h, a):  # the naive formula without attention's s² term
    return 34 * s * b * h


def act_integer_division(s, b, h, a):  # fits the power-of-two shapes only
    return s * b * h * (34 + 5 * a * s // h)


def act_visible_example(s, b, h, a):  # special-cased to the GPT-3 175B layer of the paper
    return activations(s, b, h, a) if (s, h, a) == (2048, 12288, 96) else 34 * s * b * h + 5 * s * s * b * a // 2


def act_calls_perflab(s, b, h, a):  # perflab computes it
    from perflab.memory.estimate import activations_per_layer_bytes

    return activations_per_layer_bytes(s, b, h, a)


MUTANTS = [
    (lab.check_bytes_per_param, bpp_no_master, "master"),
    (lab.check_bytes_per_param, bpp_bf16_states_fp32, "pure bf16"),
    (lab.check_bytes_per_param, bpp_ignores_optimizer, "optimizer matters"),
    (lab.check_zero, zero_off_by_one_stage, "one stage off"),
    (lab.check_zero, zero_ignores_dp, "ignores an input"),
    (lab.check_zero, zero_master_not_partitioned, "master weights"),
    (lab.check_activations, act_no_scores, "5as²b"),
    (lab.check_activations, act_integer_division, "fits only some"),
    (lab.check_activations, act_visible_example, "fits only some"),
    (lab.check_activations, act_calls_perflab, "calls perflab"),
]


def test_stubs_are_not_done():
    grading.reset()

    def stub(*a, **k):
        raise NotImplementedError

    assert not lab.check_bytes_per_param(stub)
    assert not lab.check_step_peak(stub, device="cpu")


def test_wrong_formulas_raise():
    with pytest.raises(LabCheckError, match="bytes per parameter"):
        lab.check_bytes_per_param(lambda precision, optimizer, grad_dtype: 16)
    with pytest.raises(LabCheckError, match="ZeRO"):
        lab.check_zero(lambda params, stage, dp: 16 * params / dp)
    with pytest.raises(LabCheckError, match="activations"):
        lab.check_activations(lambda s, b, h, a: 34 * s * b * h)


def test_step_peak_check_measures_and_grades():
    # the written-out phase model passes; forgetting the activations fails; the textbook sum W+G+O+A
    # misses the loss-gradient transient and falls outside ±5% on the tiny model; perflab's own
    # phase model is refused as an answer
    assert lab.check_step_peak(_solution_peak, device="cpu")
    with pytest.raises(LabCheckError, match="measured"):
        lab.check_step_peak(lambda cfg, batch, seq: 16 * param_count(cfg), device="cpu")
    with pytest.raises(LabCheckError, match="tiny-gpt"):
        lab.check_step_peak(lambda cfg, batch, seq: _solution_peak(cfg, batch, seq, transient=False) + 4 * param_count(cfg),
                            device="cpu")
    with pytest.raises(LabCheckError, match="calls perflab"):
        lab.check_step_peak(lambda cfg, batch, seq: max(p.peak_bytes for p in step_phases(cfg, batch, seq)), device="cpu")


@pytest.mark.parametrize(("check", "mutant", "keyword"), MUTANTS, ids=[m.__name__ for _c, m, _k in MUTANTS])
def test_mutant_is_rejected_with_a_hint_naming_the_mistake(check, mutant, keyword):
    with pytest.raises(LabCheckError, match="Hint") as err:
        check(mutant)
    assert keyword in str(err.value), str(err.value)


def test_reference_solution_passes():
    assert lab.check_bytes_per_param(bytes_per_param) and lab.check_zero(zero) and lab.check_activations(activations)
