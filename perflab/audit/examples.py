"""Small steps to audit when you have none at hand: perflab's own tiny transformer fed by a DataLoader
whose dataset is slow to read (lesson 07's starving loop). Used by lab 11's audit exercise; point
`perflab audit` at your own factory for your own step."""

from __future__ import annotations

import time

import torch


class SlowTokens(torch.utils.data.Dataset):
    """Random token sequences that take `io_s` seconds each to 'read' (as from a slow disk)."""

    def __init__(self, n: int, seq: int, vocab: int, io_s: float):
        self.n, self.seq, self.vocab, self.io_s = n, seq, vocab, io_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.io_s)
        g = torch.Generator().manual_seed(i)
        x = torch.randint(0, self.vocab, (self.seq + 1,), generator=g)
        return x[:-1], x[1:]


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
