"""Steps to audit when you have none at hand: lab 11's slow-DataLoader step, and any of perflab's model
configs on random tokens (lesson 16's model)."""

import torch

from perflab.audit.examples import model_step, slow_data_step
from perflab.audit.target import target_from
from perflab.workload.models import preset


def test_a_model_config_becomes_a_factory_s_step():
    cfg = preset("tiny-gpt")
    t = target_from(model_step(cfg, 2, 16), "tiny GPT")
    (x, y), = list(t.batches)
    assert x.shape == y.shape == (2, 16) and x.dtype == torch.int64 and int(x.max()) < cfg.vocab
    assert torch.equal(x[:, 1:], y[:, :-1])  # the targets are the next tokens
    assert t.tokens_per_batch == 32 and t.loss_fn is not None
    loss = t.loss_fn(t.model, (x, y))
    assert loss.ndim == 0 and loss.requires_grad and float(loss.detach()) > 0


def test_the_slow_data_step_reads_in_the_training_loop():
    built = slow_data_step(smoke=True, io_s=0.0)
    assert built["batches"].num_workers == 0 and built["tokens_per_batch"] == 4 * 16


def test_lesson_11s_gpt2_or_perflabs_tiny_gpt_where_transformers_is_missing(monkeypatch):
    import pytest

    from perflab.audit import examples, target
    from perflab.core.extras import MissingExtra

    pytest.importorskip("transformers")
    t = examples.gpt2_or_tiny((("n_layer", 1), ("n_embd", 32), ("n_head", 2), ("vocab_size", 128),
                               ("n_positions", 32)), 2, 16)
    x = next(iter(t.batches))
    assert "GPT2" in type(t.model).__name__ and x["input_ids"].shape == (2, 16)

    def missing(*a, **kw):
        raise MissingExtra("auditing a Hugging Face config: transformers is not installed; pip install 'perflab[audit]'")

    monkeypatch.setattr(target, "from_hf_config", missing)
    said = []
    t = examples.gpt2_or_tiny((("n_layer", 1),), 2, 16, smoke=True, say=said.append)
    assert said == ["auditing a Hugging Face config: transformers is not installed; pip install 'perflab[audit]'. "
                    "Auditing perflab's tiny GPT, fed by a slow DataLoader, instead."]
    assert isinstance(t.batches, torch.utils.data.DataLoader) and t.batches.num_workers == 0  # read in the loop
