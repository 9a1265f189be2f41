"""One training step's tensors, captured per linear layer, and what a loss scale does for fp16."""

import pytest
import torch

from perflab.numerics import step
from perflab.workload.models import preset


@pytest.fixture(scope="module")
def tensors():
    return step.capture(preset("tiny-gpt"), 2, 16)


def test_every_linear_layer_gives_its_four_tensors(tensors):
    cfg = preset("tiny-gpt")
    assert len(tensors.layers) == 6 * cfg.layers  # q, k, v, o, MLP up and down per block
    for name in tensors.layers:
        w, a, g = tensors.weights[name], tensors.activations[name], tensors.activation_grads[name]
        assert a.shape == (2 * 16, w.shape[1]) and g.shape == (2 * 16, w.shape[0])
        assert tensors.weight_grads[name].shape == w.shape and tensors.weight_grads[name].abs().sum() > 0
    assert set(tensors.flat()) == set(step.KINDS) and "linear layers" in tensors.describe()


def test_the_weight_gradient_is_the_product_of_the_captured_tensors(tensors):
    name = "blocks.0.mlp.down"
    want = tensors.activation_grads[name].t() @ tensors.activations[name]
    assert torch.allclose(tensors.weight_grads[name], want, rtol=1e-4, atol=1e-9)


def test_a_loss_scale_lifts_fp16s_flushed_gradients_and_can_overflow():
    # fp16's smallest subnormal is 2^-24: 2^-26 flushes to zero, and 2^-26 × 2^16 = 2^-10 does not;
    # 2^0 × 2^16 = 65536 is past fp16's 65504
    g = torch.tensor([2.0**-26, 2.0**-26, 2.0**-8, 1.0])
    t = step.loss_scale_trips(g)
    assert t.flushed("fp16", 1.0) == pytest.approx(0.5) and t.flushed("fp16", step.GRADSCALER_INIT) == 0
    assert t.overflow("fp16", 1.0) == 0 and t.overflow("fp16", step.GRADSCALER_INIT) == pytest.approx(0.25)
    assert t.flushed("bf16", 1.0) == 0 and t.overflow("bf16", 1.0) == 0  # bf16: fp32's exponent, no scale needed
    assert list(t.table().index.get_level_values(0)) == ["fp16"] * 3 + ["bf16"]


def test_gradscalers_default_scale_is_2_to_the_16():
    import inspect

    assert inspect.signature(torch.amp.GradScaler.__init__).parameters["init_scale"].default == step.GRADSCALER_INIT


def test_fp8_without_a_scale_flushes_much_of_the_gradients_and_a_tensorwise_scale_flushes_more_in_e4m3(tensors):
    from perflab.numerics import cast, scaling
    from perflab.numerics.formats import E4M3

    flat = tensors.flat()
    assert cast.trip(flat["weight gradients"], E4M3).flushed > 0.25
    assert cast.trip(flat["activation gradients"], E4M3).flushed > 0.25
    fc = scaling.format_choice({"activations": tensors.activations, "activation gradients": tensors.activation_grads})
    grads, acts = fc.get("activation gradients", "tensor", "e4m3"), fc.get("activations", "tensor", "e4m3")
    assert grads.span > acts.span  # the gradients spread wider under one scale per tensor
    assert grads.flushed > fc.get("activation gradients", "tensor", "e5m2").flushed  # E4M3 flushes what E5M2 keeps
    assert fc.get("activation gradients", "row", "e4m3").rel_error < fc.get("activation gradients", "row", "e5m2").rel_error
