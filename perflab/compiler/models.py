"""Small Llama-like models for lesson 10: the same weights with graph breaks and without.

`BrokenLM` carries four deliberate graph breaks of the kinds the PyTorch blog post "Maximizing training
throughput using PyTorch FSDP and torch.compile" (pytorch.org/blog/maximizing-training-throughput/) met: a `print`, a
`.item()` (a tensor read back to Python), data-dependent control flow on that value, and RoPE in
complex numbers (`torch.polar` / `view_as_complex`). `FixedLM` computes the same function with
real-valued RoPE and no host round trips: 0 breaks. `fixed_from(broken)` copies the weights over.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from perflab.core.validate import positive_int


def rope_angles(seq: int, d_head: int, base: float = 10000.0) -> torch.Tensor:
    """seq × d_head/2 rotation angles θ_{t,i} = t / base^(2i/d)."""
    inv = 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.float32) / d_head))
    return torch.outer(torch.arange(seq, dtype=torch.float32), inv)


def rope_complex(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """RoPE as in the original Llama code: pairs (x[2i], x[2i+1]) as complex numbers times e^{iθ}."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    rot = torch.polar(torch.ones_like(angles), angles)
    return torch.view_as_real(xc * rot).flatten(-2).to(x.dtype)


def rope_real(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """The same rotation in real arithmetic (interleaved pairs), which compiles without breaks."""
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class _Block(nn.Module):
    def __init__(self, hidden: int, heads: int, d_ff: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.RMSNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.norm2 = nn.RMSNorm(hidden)
        self.gate = nn.Linear(hidden, d_ff, bias=False)
        self.up = nn.Linear(hidden, d_ff, bias=False)
        self.down = nn.Linear(d_ff, hidden, bias=False)

    def attn(self, x, angles, rope):
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        q, k = rope(q, angles), rope(k, angles)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, h))

    def mlp(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class FixedLM(nn.Module):
    """A tiny Llama-like LM with real-valued RoPE: forward(idx[b, s]) -> logits[b, s, V]."""

    rope = staticmethod(rope_real)
    angles: torch.Tensor  # a buffer

    def __init__(self, vocab: int = 256, hidden: int = 64, heads: int = 4, layers: int = 2, d_ff: int = 172,
                 seq_len: int = 128, seed: int = 0):
        super().__init__()
        for name, v in (("vocab", vocab), ("hidden", hidden), ("heads", heads), ("layers", layers), ("d_ff", d_ff),
                        ("seq_len", seq_len)):
            positive_int(name, v)
        self.dims = dict(vocab=vocab, hidden=hidden, heads=heads, layers=layers, d_ff=d_ff, seq_len=seq_len)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.embed = nn.Embedding(vocab, hidden)
            nn.init.normal_(self.embed.weight, std=0.02)
            self.blocks = nn.ModuleList(_Block(hidden, heads, d_ff) for _ in range(layers))
            self.norm = nn.RMSNorm(hidden)
            self.head = nn.Linear(hidden, vocab, bias=False)
        self.register_buffer("angles", rope_angles(seq_len, hidden // heads), persistent=False)

    def block(self, blk, x, angles):
        x = x + blk.attn(blk.norm1(x), angles, type(self).rope)
        return x + blk.mlp(blk.norm2(x))

    def forward(self, idx):
        s = idx.shape[1]
        angles = self.angles[:s]
        x = self.embed(idx)
        for blk in self.blocks:
            x = self.block(blk, x, angles)
        return self.head(self.norm(x))


class BrokenLM(FixedLM):
    """FixedLM's function with four graph breaks: complex RoPE, a print, `.item()` and a branch on it."""

    rope = staticmethod(rope_complex)
    verbose = False

    def forward(self, idx):
        s = idx.shape[1]
        angles = self.angles[:s]
        x = self.embed(idx)
        for blk in self.blocks:
            x = self.block(blk, x, angles)
        if self.verbose:  # a print inside forward: the graph has to stop for the side effect
            print("activations", tuple(x.shape))
        scale = x.abs().max().item()  # a tensor read back to Python: the host waits for the device
        if scale > 1e4:  # control flow that depends on data
            x = x / scale
        return self.head(self.norm(x))


def build_broken(**kw) -> BrokenLM:
    m = BrokenLM(**kw)
    m.verbose = True
    return m


def fixed_from(broken: FixedLM) -> FixedLM:
    """A FixedLM with the same dimensions and weights as `broken`."""
    m = FixedLM(**broken.dims)
    m.load_state_dict(broken.state_dict())
    return m
