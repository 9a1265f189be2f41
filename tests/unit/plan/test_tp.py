"""Tests of `perflab.plan.tp`: tensor parallelism with and without sequence and loss parallelism."""

from __future__ import annotations

from functools import partial

import pytest

from perflab.plan.run import plan

from .factories import tiny_gpt


def test_sequence_parallelism_splits_the_activations_tensor_parallelism_alone_keeps_whole():
    """Korthikanti et al. (arXiv:2205.05198, §4.2.2): TP alone keeps the residual stream, the norms and the
    loss whole on every rank; with sequence (and loss) parallelism, as torchtitan applies it, they are split
    by sequence over the group, so the activations per rank shrink."""
    build = partial(tiny_gpt, 8, 128)  # activations are most of this step's memory
    tp = plan(build, gpus=2, tp=2, dtype="fp32", suggest=False)
    sp = plan(build, gpus=2, tp=2, sp=True, dtype="fp32", suggest=False)
    assert sp.layout.sp and not tp.layout.sp
    assert sp.phases["step"]["activations"] < tp.phases["step"]["activations"]
    # the same model, the same FLOPs in all
    assert sp.flops["forward"] == pytest.approx(tp.flops["forward"], rel=0.05)
