"""Tests of `perflab.tune.config`: a configuration of the step and what it builds."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch

from perflab.core.errors import InputError
from perflab.tune import config, ladder
from perflab.workload.train import make_batches

from .helpers import CPU, SMOKE


def test_the_ladder_refuses_a_model_that_is_not_gpt_shaped():
    with pytest.raises(InputError, match="GPT-shaped models"):
        config.build(replace(SMOKE.cfg, positions="rotary"), config.StepConfig(), CPU)


def test_written_out_attention_with_fewer_kv_heads_matches_sdpa():
    cfg = replace(SMOKE.cfg, heads=4, kv_heads=2)  # grouped-query attention: each K/V head serves two query heads
    x = torch.randint(0, cfg.vocab, (2, 16))
    written = config.build(cfg, config.StepConfig(sdpa=False), CPU)
    fused = config.build(cfg, config.StepConfig(sdpa=True), CPU)
    assert isinstance(written.blocks[0].attn, config.WrittenOutAttention)  # pyright: ignore[reportIndexIssue, reportAttributeAccessIssue]  # nn.Module attribute
    with torch.no_grad():
        torch.testing.assert_close(written(x), fused(x), rtol=1e-4, atol=1e-5)


def test_padding_keeps_the_function_and_written_out_attention_matches_sdpa():
    cfg = ladder.SMOKE_CFG
    a = config.build(cfg, config.StepConfig(), CPU)
    b = config.build(cfg, config.StepConfig(sdpa=True, pad_vocab=True), CPU)
    assert type(a.blocks[0].attn) is config.WrittenOutAttention and b.embed.weight.shape[0] == 512  # pyright: ignore[reportIndexIssue, reportAttributeAccessIssue]  # nn.ModuleList indexing
    x = torch.randint(0, cfg.vocab, (2, cfg.seq_len))
    with torch.no_grad():
        la, lb = a(x), b(x)
    assert lb.shape[-1] == 512 and torch.allclose(la, lb[..., :cfg.vocab], atol=1e-5)
    assert torch.equal(lb[..., cfg.vocab:], torch.zeros_like(lb[..., cfg.vocab:]))  # zero rows: zero logits


def test_the_optimizer_kinds_are_make_optimizers_adamw_forms():
    m = torch.nn.Linear(2, 2)
    assert config.optimizer_for(m, config.StepConfig(optimizer="foreach")).defaults["foreach"] is True
    loop = config.optimizer_for(m, config.StepConfig())
    assert loop.defaults["foreach"] is False and loop.defaults["lr"] == config.LR
    with pytest.raises(InputError, match="unknown optimizer kind 'sgd'"):
        config.optimizer_for(m, config.StepConfig(optimizer="sgd"))


def test_a_padded_step_trains_on_the_real_vocabulary_only():
    cfg = ladder.SMOKE_CFG
    data = make_batches(cfg, 2, 16)[0]
    losses = []
    for sc in (config.StepConfig(sdpa=True), config.StepConfig(sdpa=True, pad_vocab=True)):
        model = config.build(cfg, sc, CPU)
        runner = config.step_runner(model, config.optimizer_for(model, sc), sc, cfg, 1, CPU)
        runner.step([data])
        losses.append(runner.mean_loss())
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)  # the zero columns are cut before the loss


def test_bound_to_sets_and_restores_the_affinity():
    before = os.sched_getaffinity(0)
    one = sorted(before)[:1]
    with config.bound_to(one):
        assert os.sched_getaffinity(0) == set(one)
    assert os.sched_getaffinity(0) == before
    assert config.numa_cpus(config.StepConfig()) is None
