"""The course model's refusals (each names the bad field and what is allowed) and the pieces of a
training step no lesson reaches at its defaults."""

import pytest
import torch

from perflab.core.errors import InputError
from perflab.workload.models import ModelConfig, build_model
from perflab.workload.train import StepTimes, untrained_health


@pytest.mark.parametrize("kw, words", [
    (dict(norm="batchnorm"), ("norm", "'layernorm' or 'rmsnorm'", "batchnorm")),
    (dict(positions="rotary", hidden=12, heads=4), ("rotary", "even head size", "3")),
])
def test_config_refuses_what_the_model_cannot_build(kw, words):
    with pytest.raises(InputError) as e:
        ModelConfig(**kw)
    assert all(w in str(e.value) for w in words)


def test_unknown_init_names_the_choices():
    with pytest.raises(InputError, match="unknown init 'xavier': use one of gpt2, torch"):
        build_model(ModelConfig(), init="xavier")


def test_seed_none_draws_from_the_global_generator():
    cfg = ModelConfig(layers=1, hidden=32, heads=2, vocab=64, seq_len=16)
    torch.manual_seed(3)
    a = build_model(cfg, seed=None)
    torch.manual_seed(3)
    b = build_model(cfg, seed=None)
    c = build_model(cfg, seed=None)  # the global generator moved on
    wa, wb, wc = (next(m.parameters()) for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_a_sequence_longer_than_the_context_is_refused():
    cfg = ModelConfig(layers=1, hidden=32, heads=2, vocab=64, seq_len=16)
    with pytest.raises(InputError, match="sequence length 17 exceeds the model's seq_len 16"):
        build_model(cfg)(torch.zeros(1, 17, dtype=torch.long))


def test_step_times_as_dict_has_every_phase():
    t = StepTimes(step_s=0.4, forward_s=0.1, backward_s=0.2, optimizer_s=0.05, tokens=64)
    assert t.as_dict() == {"step_s": 0.4, "forward_s": 0.1, "backward_s": 0.2, "optimizer_s": 0.05, "tokens": 64, "extra_s": 0.0}


def test_untrained_health_refuses_unknown_targets():
    with pytest.raises(InputError, match="targets must be 'next' or 'inputs' \\(got 'previous'\\)"):
        untrained_health(ModelConfig(), targets="previous")
