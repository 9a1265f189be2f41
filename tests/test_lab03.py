"""Lab 03's checks can fail: wrong answers raise, stubs say 'not done', right answers pass."""

import pytest

from perflab.core import grading
from perflab.core.grading import LabCheckError
from perflab.memory import lab03 as lab
from perflab.memory.estimate import step_phases
from perflab.workload.models import param_count


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


def _solution_peak(cfg, batch, seq, transient=True):
    """The solution notebook's predict_step_peak, written out."""
    n_tok, h, f, v = batch * seq, cfg.hidden, cfg.d_ff, cfg.vocab
    p = param_count(cfg)
    per_layer = 4 * n_tok * (2 * h + 2 * h + 4 * h + 2 * f)
    activations = cfg.layers * per_layer + 4 * n_tok * 2 * h + 4 * n_tok * v
    start_of_backward = 12 * p + activations + (2 * 4 * n_tok * v if transient else 0)
    return max(start_of_backward, 16 * p)


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
