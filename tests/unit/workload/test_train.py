"""Tests of `perflab.workload.train`."""


import pytest
import torch

from perflab.core.errors import InputError
from perflab.workload.models import PRESETS, ModelConfig, build_model, preset
from perflab.workload.train import (
    StepRunner,
    StepTimes,
    make_batches,
    model_loss,
    next_token_loss,
    untrained_health,
)


def test_step_times_as_dict_has_every_phase():
    t = StepTimes(step_s=0.4, forward_s=0.1, backward_s=0.2, optimizer_s=0.05, tokens=64)
    assert t.as_dict() == {"step_s": 0.4, "forward_s": 0.1, "backward_s": 0.2, "optimizer_s": 0.05, "tokens": 64, "extra_s": 0.0}


def test_untrained_health_refuses_unknown_targets():
    with pytest.raises(InputError, match="targets must be 'next' or 'inputs' \\(got 'previous'\\)"):
        untrained_health(ModelConfig(), targets="previous")


def test_hooks_and_phases():
    cfg = preset("tiny-gpt")
    seen = []
    r = StepRunner(build_model(cfg), hooks={"before_step": [lambda run, i: seen.append(("b", i))],
                                            "after_step": [lambda run, i: seen.append(("a", i))]})
    times = r.run(make_batches(cfg, 2, 16, n=2), steps=2, warmup=1)
    assert len(times) == 2 and seen == [("b", 0), ("a", 0), ("b", 1), ("a", 1), ("b", 2), ("a", 2)]
    t = times[0]
    assert t.tokens == 32 and min(t.forward_s, t.backward_s, t.optimizer_s) > 0
    assert t.forward_s + t.backward_s + t.optimizer_s <= t.step_s * 1.05
    with pytest.raises(InputError):
        r.step(make_batches(cfg, 2, 16, n=2))  # grad_accum=1 takes one micro-batch


@pytest.mark.usefixtures("watch_all_cores")
def test_a_run_records_the_machines_quietness_over_its_timed_steps():
    from perflab.core.quietness import MadeUpLoad, injected

    cfg = preset("tiny-gpt")
    r = StepRunner(build_model(cfg))
    with injected(MadeUpLoad(0.5, tick_s=1e-4)):
        r.run(make_batches(cfg, 2, 16, n=2), steps=2, warmup=1)
    assert r.last_quietness.disturbed and r.last_quietness.share == pytest.approx(0.5) and r.last_waited_s >= 0.0
    with injected(MadeUpLoad(0.0, tick_s=1e-4)):
        r.run(make_batches(cfg, 2, 16, n=2), steps=2, warmup=1)
    assert r.last_quietness.quiet


def test_one_loss_is_next_token_cross_entropy():
    cfg = PRESETS["tiny-gpt"]
    m = build_model(cfg)
    inputs, targets = make_batches(cfg, 2, 16)[0]
    assert torch.equal(inputs[:, 1:], targets[:, :-1])  # targets are the inputs shifted by one
    logits = m(inputs)
    want = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1))
    assert model_loss(m, (inputs, targets)).item() == pytest.approx(want.item(), rel=1e-6)
    assert next_token_loss(logits, targets).item() == pytest.approx(want.item(), rel=1e-6)
