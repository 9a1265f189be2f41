"""Training steps nobody on the project wrote, as a learner hands them to `perflab audit`: models from
Hugging Face configs, a small convolutional network, and two planted faults (a slow DataLoader, a
forward that calls .item())."""

import time

import torch
from torch import nn

GPT2 = {"n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 100, "n_positions": 32}
LLAMA_GQA = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
             "intermediate_size": 96, "vocab_size": 100, "max_position_embeddings": 64}
MIXTRAL = {**LLAMA_GQA, "num_local_experts": 4, "num_experts_per_tok": 2}
BATCH, SEQ = 2, 16


def convnet():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))
    batches = [(torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))) for _ in range(8)]
    return {"model": model, "batches": batches}


class SlowImages(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.03)  # storage that is slow to read
        g = torch.Generator().manual_seed(i)
        return torch.randn(16, generator=g), torch.randint(0, 4, (), generator=g)


def slow_loader():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    return {"model": model, "batches": torch.utils.data.DataLoader(SlowImages(), batch_size=4)}


class Syncing(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 64)
        self.b = nn.Linear(64, 4)

    def forward(self, x):
        h = self.a(x).relu()
        if h.mean().item() > 1e9:  # a check on the host: a sync, and a graph break
            h = h * 0
        return self.b(h)


def item_in_forward():
    torch.manual_seed(0)
    return {"model": Syncing(), "batches": [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(8)]}


# ---------------------------------------------------------------- bad input


def raises():
    raise RuntimeError("cannot open the shards")


def wrong_type():
    return nn.Linear(2, 2)


def forward_fails():
    return {"model": nn.Linear(16, 4), "batches": [(torch.randn(2, 15), torch.zeros(2, dtype=torch.long))]}


def empty():
    return {"model": nn.Linear(16, 4), "batches": []}


def exhausted():
    it = iter([(torch.randn(2, 16), torch.zeros(2, dtype=torch.long))])
    next(it)
    return {"model": nn.Linear(16, 4), "batches": it}


def vector_loss():
    return {"model": nn.Linear(16, 4), "batches": [torch.randn(2, 16)],
            "loss_fn": lambda m, b: m(b).sum(dim=1)}


def out_of_memory():
    def loss(m, b):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    return {"model": nn.Linear(16, 4), "batches": [torch.randn(2, 16)], "loss_fn": loss}


class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 64)
        self.b = nn.Linear(64, 4)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        return self.b(checkpoint(lambda t: self.a(t).relu(), x, use_reentrant=False))


def checkpointed():
    torch.manual_seed(0)
    x = torch.randn(8, 16, requires_grad=True)  # so the checkpointed product's input gradient runs too
    return {"model": Checkpointed(), "batches": [(x, torch.randint(0, 4, (8,))) for _ in range(8)]}
