"""The fp8 emulation's arithmetic, and the parity verdict against the distance between two fp32 runs from different random seeds."""

import pytest
import torch

from perflab.numerics import parity
from perflab.numerics.formats import E4M3, E5M2
from perflab.workload.models import build_model, preset


def test_the_emulated_linear_rounds_inputs_and_weights_to_e4m3_and_the_gradient_to_e5m2():
    g = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(64, 32)
    x = torch.randn(8, 64, generator=g, requires_grad=True)
    f = parity.Fp8Linear(lin)
    y = f(x)
    xq, wq = parity.fake_quant(x.detach(), E4M3), parity.fake_quant(lin.weight.detach(), E4M3)
    assert torch.allclose(y, xq @ wq.t() + lin.bias, atol=1e-6)
    gy = torch.randn(8, 32, generator=g)
    y.backward(gy)
    gq = parity.fake_quant(gy, E5M2)
    assert torch.allclose(x.grad, gq @ wq, atol=1e-6) and torch.allclose(lin.weight.grad, gq.t() @ xq, atol=1e-5)
    assert not torch.equal(gq, gy)


def test_every_linear_layer_is_swapped():
    m = parity.to_fp8(build_model(preset("tiny-gpt")))
    assert sum(isinstance(x, parity.Fp8Linear) for x in m.modules()) == 12
    assert not any(isinstance(x, torch.nn.Linear) for x in m.modules())


def test_a_short_run_in_every_mode_trains():
    for mode in parity.MODES:
        losses = parity.train(preset("tiny-gpt"), mode, steps=4, batch=2, seq=8, batches=1)
        assert len(losses) == 4 and losses[-1] < losses[0]
    with pytest.raises(Exception, match="unknown mode"):
        parity.train(preset("tiny-gpt"), "fp4", steps=1, batch=1, seq=4)


def test_the_verdict_compares_with_two_fp32_runs_distance():
    r = parity.ParityResult({"fp32": [3.0, 2.0, 1.0], "fp32, random seed 1": [3.0, 2.2, 1.2], "bf16 autocast": [3.0, 2.05, 1.05],
                             "fp8 (emulated)": [3.0, 2.5, 1.5]}, window=2)
    assert r.noise == pytest.approx(0.2) and r.difference("bf16 autocast") == pytest.approx(0.05)
    assert r.within_noise("bf16 autocast") and not r.within_noise("fp8 (emulated)")
    assert "outside the 0.2" in r.verdict() and "within" in r.verdict("bf16 autocast")
    assert list(r.table()["within two fp32 runs' distance"]) == ["(the reference)", "(the noise)", "yes", "no"]


def test_compare_runs_the_four_runs():
    r = parity.compare(preset("tiny-gpt"), steps=3, batch=1, seq=8, batches=1, window=2, progress=False)
    assert list(r.runs) == ["fp32", "fp32, random seed 1", "bf16 autocast", "fp8 (emulated)"] and r.window == 2
