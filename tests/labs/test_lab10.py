"""Lab 10: its checks accept the reference answer and reject each plausible mistake with a hint."""

from __future__ import annotations

import pytest
import torch

from perflab.compiler import lab10, models, parity
from perflab.compiler import lab10 as lab
from perflab.grading.checks import LabCheckError


def _half_split_rope(x, angles):
    # a classic slip: rotate (x[:d/2], x[d/2:]) instead of the interleaved pairs the weights were made for
    cos, sin = angles.cos(), angles.sin()
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class _Stub(models.BrokenLM):
    def forward(self, idx):
        raise NotImplementedError


def rope_ref(x, angles):
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def rope_halves(x, angles):  # the wrong convention: the two halves of the head instead of interleaved pairs
    cos, sin = angles.cos(), angles.sin()
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


def rope_sign(x, angles):  # turns the wrong way
    cos, sin = angles.cos(), angles.sin()
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos + b * sin, -a * sin + b * cos), dim=-1).flatten(-2)


def rope_swapped(x, angles):  # sin and cos swapped
    cos, sin = angles.sin(), angles.cos()
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def rope_ignores_angles(x, angles):
    return x.clone()


def rope_off_by_one(x, angles):  # positions shifted by one
    shifted = torch.cat((angles[1:], angles[-1:] + (angles[-1:] - angles[-2:-1])), dim=0)
    return rope_ref(x, shifted)


def rope_calls_perflab(x, angles):
    return models.rope_complex(x, angles)


class DeletesRescale(models.BrokenLM):
    rope = staticmethod(rope_ref)

    def forward(self, idx):
        angles = self.get_buffer("angles")[: idx.shape[1]]
        x = self.embed(idx)
        for blk in self.blocks:
            x = self.block(blk, x, angles)
        return self.head(self.norm(x))


class Reference(models.BrokenLM):
    rope = staticmethod(rope_ref)

    def forward(self, idx):
        angles = self.get_buffer("angles")[: idx.shape[1]]
        x = self.embed(idx)
        for blk in self.blocks:
            x = self.block(blk, x, angles)
        scale = x.abs().amax()
        x = torch.where(scale > 1e4, x / scale, x)
        return self.head(self.norm(x))


class _ItemLeft(Reference):
    def forward(self, idx):
        x = super().forward(idx)
        return x / x.abs().max().item() * x.abs().max()  # same values, one .item() break left


class _HalfSplit(Reference):
    rope = staticmethod(_half_split_rope)


class KeepsItem(Reference):  # the branch kept on a Python number: still a break
    def forward(self, idx):
        angles = self.get_buffer("angles")[: idx.shape[1]]
        x = self.embed(idx)
        for blk in self.blocks:
            x = self.block(blk, x, angles)
        scale = x.abs().max().item()
        if scale > 1e4:
            x = x / scale
        return self.head(self.norm(x))


class WrongThreshold(Reference):  # an off-by-a-factor threshold: 1e5 where the original says 1e4
    def forward(self, idx):
        angles = self.get_buffer("angles")[: idx.shape[1]]
        x = self.embed(idx)
        for blk in self.blocks:
            x = self.block(blk, x, angles)
        scale = x.abs().amax()
        return self.head(self.norm(torch.where(scale > 1e5, x / scale, x)))


class UsesFixedLM(models.FixedLM):  # perflab's answer as the base class
    pass


def test_lab10_passes_the_solution_and_says_not_done_for_the_stub(capsys):
    from perflab.compiler import lab10

    assert lab10.check_rope(rope_ref)
    assert lab10.check_model(Reference)
    assert not lab10.check_model(_Stub)
    assert not lab10.check_rope(lambda x, a: (_ for _ in ()).throw(NotImplementedError))
    assert capsys.readouterr().out.count("not done yet") == 2


def test_lab10_fails_a_break_left_and_different_outputs():
    from perflab.compiler import lab10
    from perflab.grading.checks import LabCheckError

    with pytest.raises(LabCheckError, match=r"item\(\)"):
        lab10.check_model(_ItemLeft)
    with pytest.raises(LabCheckError, match="graph break"):
        lab10.check_model(models.BrokenLM)  # the given model itself: the print and the .item()
    with pytest.raises(LabCheckError, match="logits differ"):
        lab10.check_model(_HalfSplit)
    with pytest.raises(LabCheckError, match="interleaved"):
        lab10.check_rope(_half_split_rope)
    # the tolerance is fp32's (~1000 eps), far below the half-split mistake's error
    assert lab10.tolerance() == parity.tolerance(torch.float32) < 1e-3


@pytest.mark.parametrize("student, words", [
    (lambda x, angles: None, "rope_real: returned None for x of shape (2, 2, 8, 16); did you forget `return`?"),
    (lambda x, angles: x[..., :-1], "rope_real: for x of shape (2, 2, 8, 16) expected a tensor of the same shape, "
                                    "got (2, 2, 8, 15)"),
    (lambda x, angles: x.tolist(), "rope_real: for x of shape (2, 2, 8, 16) expected a tensor of the same shape, got list"),
    (lambda x, angles: x.to(torch.complex64), "rope_real: the result is complex; compute the rotation with real tensors"),
])
def test_lab10_rope_check_names_what_is_wrong_with_the_result(student, words):
    with pytest.raises(LabCheckError) as e:
        lab10.check_rope(student)
    assert str(e.value) == words


def test_lab10_model_check_refuses_logits_of_the_wrong_shape():
    class LastTokenOnly(models.BrokenLM):
        rope = staticmethod(lambda x, angles: x)

        def forward(self, idx):
            x = self.embed(idx)
            for blk in self.blocks:
                x = self.block(blk, x, self.angles[: idx.shape[1]])
            return self.head(self.norm(x))[:, -1]

    with pytest.raises(LabCheckError) as e:
        lab10.check_model(LastTokenOnly)
    assert str(e.value) == "no graph breaks: for input ids of shape (2, 16) expected logits of shape (2, 16, 64), got (2, 64)"


def test_lab10_model_check_on_stubs_and_models_that_do_not_fit(capsys):
    class NotDone(models.BrokenLM):
        def __init__(self, **kw):
            raise NotImplementedError

    assert not lab10.check_model(NotDone)
    assert "not done yet" in capsys.readouterr().out

    class NoArgs(torch.nn.Module):
        def __init__(self):
            super().__init__()

    with pytest.raises(LabCheckError, match="NoArgs\\(\\*\\*.*\\) failed .*subclass BrokenLM and keep its constructor"):
        lab10.check_model(NoArgs)

    class Smaller(torch.nn.Module):
        def __init__(self, **kw):
            super().__init__()
            self.emb = torch.nn.Embedding(8, 4)

    with pytest.raises(LabCheckError, match="your model must have BrokenLM's parameters"):
        lab10.check_model(Smaller)


def test_reference_passes():
    assert lab.check_rope(rope_ref)
    assert lab.check_model(Reference)


@pytest.mark.parametrize("mutant, kind", [
    (rope_halves, "interleaved"), (rope_sign, "interleaved"), (rope_swapped, "interleaved"),
    (rope_ignores_angles, "interleaved"), (rope_off_by_one, "interleaved"), (rope_calls_perflab, "perflab's own rope_complex"),
])
def test_rope_mutants_are_refused(mutant, kind):
    with pytest.raises(LabCheckError, match="rope_real") as e:
        lab.check_rope(mutant)
    assert kind in str(e.value)


@pytest.mark.parametrize("mutant, kind", [
    (DeletesRescale, "deleted rescale"), (KeepsItem, "graph break"), (WrongThreshold, "pass the 1e4 threshold"),
    (UsesFixedLM, "perflab's own FixedLM"),
])
def test_model_mutants_are_refused(mutant, kind):
    with pytest.raises(LabCheckError, match="no graph breaks") as e:
        lab.check_model(mutant)
    assert kind in str(e.value)


class DiffersWhenTraced(Reference):  # clean and wrong when dynamo traces it, the reference when run
    def forward(self, idx):
        if torch.compiler.is_compiling():
            return torch.zeros(idx.shape[0], idx.shape[1], lab.DIMS["vocab"])
        return super().forward(idx)


def test_the_traced_graph_runs_as_data_where_no_learner_code_runs():
    """perflab grade's judge runs the graph dynamo traced (as plain data: ATen operators and names)
    in a process that never ran the learner's code: the reference's gives the original's logits,
    and a forward that differs when traced gives its traced logits, not its eager ones."""
    original = lab.given_model()
    original.verbose = False
    x = lab.inputs()[0]
    got = {}
    for cls in (Reference, DiffersWhenTraced):
        traced = lab.probe_graphs(cls, [list(x.shape)])
        assert traced["graph_breaks"] == 0 and "export_error" not in traced, traced
        ran = lab.run_graphs(traced["graphs"], [(0, original.state_dict(), x)])
        got[cls.__name__] = ran["logits"][0]
    with torch.no_grad():
        want = original(x)
    assert torch.allclose(got["Reference"], want, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(got["DiffersWhenTraced"], want, rtol=1e-4, atol=1e-4)
    assert lab.run_graphs([{"inputs": [], "nodes": [], "outputs": []}], [(0, {}, x)])["wrong"].startswith(
        "the graph traced from your forward does not run")
