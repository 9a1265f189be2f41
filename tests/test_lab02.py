"""Lab 02's checks accept right answers, reject wrong ones with a useful message, and wait for stubs."""

import pytest

from perflab.core import grading
from perflab.core.grading import LabCheckError
from perflab.flops import lab02 as lab
from perflab.flops.transformer import exact_flops
from perflab.workload.models import preset


def right_palm(n_params, layers, heads, head_dim, seq):
    return 6 * n_params + 12 * layers * heads * head_dim * seq


def right_mfu(tokens_per_s, flops_per_token, n_devices, peak_tflops):
    return tokens_per_s * flops_per_token / (n_devices * peak_tflops * 1e12)


def stub(*args, **kwargs):
    raise NotImplementedError


def setup_function():
    grading.reset()


def test_palm_flops():
    assert lab.check_palm_flops(right_palm)
    assert not lab.check_palm_flops(stub)
    with pytest.raises(LabCheckError, match="attention term"):
        lab.check_palm_flops(lambda n_params, **kw: 6 * n_params)


def test_mfu():
    assert lab.check_mfu(right_mfu)
    assert not lab.check_mfu(stub)
    with pytest.raises(LabCheckError):  # a percentage, not a fraction
        lab.check_mfu(lambda **kw: 100 * right_mfu(**kw))
    with pytest.raises(LabCheckError):  # forgot the number of devices
        lab.check_mfu(lambda tokens_per_s, flops_per_token, n_devices, peak_tflops: tokens_per_s * flops_per_token / (peak_tflops * 1e12))


def test_tokens_per_second():
    def written_out(model, batch, seq, steps, device=None):  # the solution notebook's timing loop
        import time

        import torch

        from perflab.workload.models import build_model
        from perflab.workload.train import make_batches, next_token_loss

        cfg = preset(model)
        net = build_model(cfg)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        batches = make_batches(cfg, batch, seq, n=2)

        def step(x, y):
            next_token_loss(net(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step(*batches[0])
        t0 = time.perf_counter()
        for i in range(steps):
            step(*batches[i % 2])
        return batch * seq * steps / (time.perf_counter() - t0)

    assert lab.check_tokens_per_second(written_out, batch=2, seq=32, steps=2)
    assert not lab.check_tokens_per_second(stub)
    with pytest.raises(LabCheckError, match="much faster"):
        lab.check_tokens_per_second(lambda **kw: 1e12, batch=2, seq=32, steps=2)
    with pytest.raises(LabCheckError, match="positive number"):
        lab.check_tokens_per_second(lambda **kw: -5.0, batch=2, seq=32, steps=2)


def test_step_mfu_and_hfu():
    cfg, s, tps, peak = preset("tiny-gpt"), 64, 12345.0, 0.2
    ex = exact_flops(cfg, 1, s)
    m, h = tps * ex.model / s / (peak * 1e12), tps * ex.hardware / s / (peak * 1e12)
    assert lab.check_step_mfu(m, tokens_per_s=tps, model="tiny-gpt", seq=s, peak_tflops=peak)
    assert lab.check_step_mfu(h, tokens_per_s=tps, model="tiny-gpt", seq=s, peak_tflops=peak, kind="hfu")
    assert not lab.check_step_mfu(None, tokens_per_s=tps, model="tiny-gpt", seq=s, peak_tflops=peak)
    with pytest.raises(LabCheckError, match="that is the HFU"):
        lab.check_step_mfu(h, tokens_per_s=tps, model="tiny-gpt", seq=s, peak_tflops=peak)
    with pytest.raises(LabCheckError, match="fraction"):
        lab.check_step_mfu(100 * m, tokens_per_s=tps, model="tiny-gpt", seq=s, peak_tflops=peak)
    with pytest.raises(LabCheckError, match="expected"):
        lab.check_step_mfu(2 * m, tokens_per_s=tps, model="tiny-gpt", seq=s, peak_tflops=peak)


def test_summary_requires_all():
    lab.check_palm_flops(stub)
    with pytest.raises(LabCheckError):
        grading.summary(require_all=True)
