"""Lab 10: the reference RoPE and model pass; each plausible wrong one is refused with a hint naming its kind."""

import pytest
import torch

from perflab.compiler import lab10 as lab
from perflab.compiler import models
from perflab.core import grading
from perflab.core.grading import LabCheckError


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


@pytest.fixture(autouse=True)
def _fresh():
    grading.reset()


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
