"""Tests of `perflab.workload.train`."""


import pytest
import torch

from perflab.core.errors import InputError
from perflab.workload.models import PRESETS, ModelConfig, build_model, preset
from perflab.workload.train import (
    Health,
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


def test_untrained_health_is_a_typed_result_near_ln_v():
    h = untrained_health(preset("tiny-gpt"), batch=1, seq=16, reps=1)
    assert isinstance(h, Health) and h.model == "tiny-gpt" and h.fwd_bwd_s > 0
    assert abs(h.loss - h.ln_V) < 0.5 and h.denormal_grads == 0


def test_phases_are_wrapped_in_order_and_keep_loss_false_holds_no_loss():
    import contextlib

    cfg = preset("tiny-gpt")
    seen = []

    @contextlib.contextmanager
    def phase(name, done):
        seen.append((name, done))
        yield

    data = make_batches(cfg, 2, 16)[0]
    r = StepRunner(build_model(cfg), phase=phase, keep_loss=False)
    r.step([data])
    r.step([data])
    assert seen == [(p, i) for i in (0, 1) for p in ("forward", "backward", "optimizer step", "zero_grad")]
    assert r.micro_losses == [] and r.last_loss == pytest.approx(model_loss(build_model(cfg), data).item(), rel=0.05)
    with pytest.raises(InputError, match="no loss kept"):
        r.mean_loss()


def test_accumulation_keeps_each_micro_loss_and_the_step_equals_its_parts():
    cfg = preset("tiny-gpt")
    mbs = make_batches(cfg, 2, 16, n=2)
    a = StepRunner(build_model(cfg), grad_accum=2)
    a.step(mbs)
    want = [model_loss(build_model(cfg), mb).item() for mb in mbs]  # the same initial weights
    assert [float(v) for v in a.micro_losses] == pytest.approx(want, rel=1e-5)
    assert a.mean_loss() == pytest.approx(sum(want) / 2, rel=1e-5) and a.last_loss == pytest.approx(want[1], rel=1e-5)
    b = StepRunner(build_model(cfg), grad_accum=2)
    b.accumulate(mbs)  # the passes alone: gradients left for update()
    assert all(p.grad is not None for p in b.model.parameters()) and b.steps_done == 0
    b.update()
    assert b.steps_done == 1 and all(p.grad is None for p in b.model.parameters())
    for pa, pb in zip(a.model.parameters(), b.model.parameters()):
        torch.testing.assert_close(pa, pb)


def test_compiled_checkpointed_and_cut_output_steps_match_the_plain_one():
    cfg = preset("tiny-gpt")
    data = make_batches(cfg, 2, 16)[0]
    plain = StepRunner(build_model(cfg))
    plain.step([data])
    torch._dynamo.reset()
    try:
        compiled = StepRunner(build_model(cfg), compile_kw={"backend": "eager"}, checkpointing=True)
        compiled.step([data])
    finally:
        torch._dynamo.reset()
    assert compiled.model.checkpointing and compiled.forward is not compiled.model
    assert compiled.last_loss == pytest.approx(plain.last_loss, rel=1e-5)
    # an output function sees the logits before the loss: cutting no column changes nothing
    cut = StepRunner(build_model(cfg), output=lambda logits: logits[..., :cfg.vocab])
    cut.step([data])
    assert cut.last_loss == pytest.approx(plain.last_loss, rel=1e-6)
