"""Memory by part of one step on this machine's CPU, and lesson 03's estimate only where a config says
the model's shape."""

from types import SimpleNamespace

import torch

from perflab.audit.memory import estimate, measure_memory


def test_the_parts_of_a_small_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(8, 32), torch.randint(0, 4, (8,))

    def loss_fn(m, b):
        return torch.nn.functional.cross_entropy(m(b[0]), b[1])

    def step(b):
        opt.zero_grad(set_to_none=True)
        loss_fn(model, b).backward()
        opt.step()

    step((x, y))  # AdamW's states exist after a first step
    n = sum(p.numel() for p in model.parameters())
    m = measure_memory(model, opt, step, loss_fn, (x, y), torch.device("cpu"), None, None, 8, n)
    assert m.weights == 4 * n and m.grads == 4 * n and m.optimizer >= 8 * n
    assert m.activations > 0 and m.peak >= m.weights + m.optimizer and m.estimate is None
    assert any(note.startswith("peak: weights + optimizer states") for note in m.notes)
    assert [k for k, _ in m.parts()] == ["weights", "grads", "optimizer", "activations", "peak", "estimate"]


def test_lesson_03_estimate_needs_a_shape_tokens_and_adam():
    cfg = SimpleNamespace(n_layer=2, n_embd=64, n_head=2, vocab_size=100)
    adam = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))])
    est = estimate(cfg, 100_000, 2 * 16, 2, adam)
    assert est and est > 16 * 100_000  # fp32 weights, gradients and two AdamW states, then activations
    assert estimate(None, 100_000, 32, 2, adam) is None
    assert estimate(SimpleNamespace(n_layer=2), 100_000, 32, 2, adam) is None  # no hidden size, no heads
    assert estimate(cfg, 100_000, None, 2, adam) is None
    assert estimate(cfg, 100_000, 32, 2, torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))])) is None
