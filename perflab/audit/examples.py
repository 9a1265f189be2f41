"""Small steps to audit when you have none at hand: perflab's own tiny transformer fed by a DataLoader
whose dataset is slow to read (lesson 07's starving loop), used by lab 11's audit exercise; any of
perflab's model configs fed random tokens, used by lesson 16 (where fp8 would pay on its model); and
lesson 11's Hugging Face GPT-2 (`gpt2_or_tiny`). Point `perflab audit` at your own factory for your own
step."""

from __future__ import annotations

import torch

from perflab.workload.data import SlowTokens  # the course's one slow dataset of token ids


def slow_data_step(smoke: bool = False, io_s: float = 0.05) -> dict:
    """A factory's return value: perflab's tiny GPT (lesson 02's preset) and a DataLoader that reads in
    the training loop (num_workers=0) from a slow dataset."""
    from perflab.workload.models import build_model, preset

    cfg = preset("tiny-gpt")
    if smoke:
        cfg = cfg.with_(layers=1, hidden=32, heads=2, vocab=128, seq_len=16)
    seq = min(cfg.seq_len, 32)
    model = build_model(cfg, seed=0)
    loader = torch.utils.data.DataLoader(SlowTokens(64, seq, cfg.vocab, io_s), batch_size=4)
    return {"model": model, "batches": loader, "tokens_per_batch": 4 * seq}


def model_step(cfg, batch: int, seq: int, seed: int = 0) -> dict:
    """A factory's return value for one of perflab's model configs (`perflab.workload.models.ModelConfig`):
    its model, one batch of `batch` × `seq` random token ids and their next tokens, and the course's
    next-token loss (`perflab.workload.train`)."""
    from perflab.workload.models import build_model
    from perflab.workload.train import make_batches, model_loss

    return {"model": build_model(cfg, seed=seed), "batches": make_batches(cfg, batch, seq, n=1, seed=seed),
            "loss_fn": model_loss, "tokens_per_batch": batch * seq}


def gpt2_or_tiny(overrides, batch: int, seq: int, *, smoke: bool = False, say=print):
    """Lesson 11's audit target: a Hugging Face GPT-2 built from its config with `overrides` (transformers'
    names: n_layer, n_embd, ...; random weights, nothing downloaded) fed random batches of `batch` × `seq`;
    where transformers (perflab's `audit` extra) is missing, perflab's tiny GPT fed by a slow DataLoader
    (`slow_data_step`), and `say` tells why."""
    from perflab.audit.target import from_hf_config, target_from
    from perflab.core.extras import MissingExtra

    try:
        return from_hf_config("gpt2", dict(overrides), batch=batch, seq=seq)
    except MissingExtra as e:  # transformers comes with perflab's `audit` extra
        say(f"{e}. Auditing perflab's tiny GPT, fed by a slow DataLoader, instead.")
        return target_from(slow_data_step(smoke), "perflab's tiny GPT, slow DataLoader")
