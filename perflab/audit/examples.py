"""Small steps to audit when you have none at hand: perflab's own tiny transformer fed by a DataLoader
whose dataset is slow to read (lesson 07's starving loop). Used by lab 11's audit exercise; point
`perflab audit` at your own factory for your own step."""

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
