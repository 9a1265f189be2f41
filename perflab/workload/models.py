"""Decoder-only transformer configs, exact parameter counts, and small PyTorch models built from them.

One `ModelConfig` describes GPT-like models (learned positions, LayerNorm with bias, GELU MLP of
width 4h, tied embeddings) and Llama-like ones (rotary positions, RMSNorm, SwiGLU MLP, grouped-query
attention, untied output layer) alike. `param_count(cfg)` is exact: it equals
`sum(p.numel() for p in build_model(cfg).parameters())`, and for the presets it reproduces the
published counts (GPT-2 small 124,439,808; Llama-2-7B 6,738,415,616).

Vocabulary (the course's words): b micro-batch, s sequence length, h hidden size, a heads,
L layers, V vocabulary, N parameters.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON
from perflab.core.validate import positive_int


@dataclass(frozen=True)


class ModelConfig:
    name: str = "custom"
    layers: int = 2  # L
    hidden: int = 128  # h
    heads: int = 4  # a
    kv_heads: int | None = None  # grouped-query attention; None: = heads (multi-head attention)
    ffn: int | None = None  # MLP width; None: 4h (or 8h/3 rounded up to 256 when glu)
    glu: bool = False  # SwiGLU MLP (three matrices) instead of GELU (two)
    vocab: int = 1024  # V
    seq_len: int = 128  # s: the context length (and number of learned positions)
    tied: bool = True  # output layer shares the token embedding
    bias: bool = True  # biases in linear layers and norms
    positions: str = "learned"  # 'learned' (GPT) or 'rotary' (Llama)
    norm: str = "layernorm"  # 'layernorm' or 'rmsnorm'
    head_dim: int | None = None  # None: hidden // heads

    def __post_init__(self):
        for f in ("layers", "hidden", "heads", "vocab", "seq_len"):
            positive_int(f, getattr(self, f))
        kv = self.kv_heads or self.heads
        positive_int("kv_heads", kv)
        if self.heads % kv:
            raise InputError(f"heads ({self.heads}) must be a multiple of kv_heads ({kv})")
        if self.head_dim is None and self.hidden % self.heads:
            raise InputError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads}): try "
                             f"{self.hidden - self.hidden % self.heads or self.heads}")
        if self.positions not in ("learned", "rotary"):
            raise InputError(f"positions must be 'learned' or 'rotary' (got {self.positions!r})")
        if self.norm not in ("layernorm", "rmsnorm"):
            raise InputError(f"norm must be 'layernorm' or 'rmsnorm' (got {self.norm!r})")
        if self.positions == "rotary" and self.d_head % 2:
            raise InputError(f"rotary positions need an even head size (got {self.d_head})")
        if self.ffn is not None:
            positive_int("ffn", self.ffn)

    @property
    def n_kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def d_ff(self) -> int:
        if self.ffn:
            return self.ffn
        if self.glu:  # Llama's rule: 2/3 of 4h, rounded up to a multiple of 256
            return 256 * math.ceil(8 * self.hidden / 3 / 256)
        return 4 * self.hidden

    def with_(self, **changes) -> ModelConfig:
        return replace(self, **changes)

    def as_dict(self) -> JSON:
        """The shape with its derived sizes filled in (what `perflab flops --json` and `perflab memory
        --json` print as the model)."""
        d = asdict(self)
        d.update(kv_heads=self.n_kv, ffn=self.d_ff, head_dim=self.d_head)
        return d


# Published shapes. Sources: GPT-2 — Radford et al. 2019 and the released checkpoints (HF config);
# GPT-3 — Brown et al. 2020, Table 2.1; Llama 2 — Touvron et al. 2023 and the released configs
# (intermediate_size 11008 / 13824 / 28672; 70B uses 8 KV heads).
PRESETS: dict[str, ModelConfig] = {
    "gpt2-small": ModelConfig("gpt2-small", 12, 768, 12, None, 3072, False, 50257, 1024, True, True, "learned", "layernorm"),
    "gpt2-medium": ModelConfig("gpt2-medium", 24, 1024, 16, None, 4096, False, 50257, 1024, True, True, "learned", "layernorm"),
    "gpt2-large": ModelConfig("gpt2-large", 36, 1280, 20, None, 5120, False, 50257, 1024, True, True, "learned", "layernorm"),
    "gpt2-xl": ModelConfig("gpt2-xl", 48, 1600, 25, None, 6400, False, 50257, 1024, True, True, "learned", "layernorm"),
    "gpt3-175b": ModelConfig("gpt3-175b", 96, 12288, 96, None, 49152, False, 50257, 2048, True, True, "learned", "layernorm"),
    "llama2-7b": ModelConfig("llama2-7b", 32, 4096, 32, 32, 11008, True, 32000, 4096, False, False, "rotary", "rmsnorm"),
    "llama2-13b": ModelConfig("llama2-13b", 40, 5120, 40, 40, 13824, True, 32000, 4096, False, False, "rotary", "rmsnorm"),
    "llama2-70b": ModelConfig("llama2-70b", 80, 8192, 64, 8, 28672, True, 32000, 4096, False, False, "rotary", "rmsnorm"),
    # small shapes that train in seconds on a laptop CPU
    "tiny-gpt": ModelConfig("tiny-gpt", 2, 128, 4, None, 512, False, 1024, 128, True, True, "learned", "layernorm"),
    "tiny-llama": ModelConfig("tiny-llama", 2, 128, 4, 2, 352, True, 1024, 128, False, False, "rotary", "rmsnorm"),
    "small-gpt": ModelConfig("small-gpt", 4, 256, 8, None, 1024, False, 4096, 256, True, True, "learned", "layernorm"),
    "small-llama": ModelConfig("small-llama", 4, 256, 8, 4, 704, True, 4096, 256, False, False, "rotary", "rmsnorm"),
}


# Shapes of the published runs notebook 02 recomputes (added for the MFU lesson).
# PaLM 540B — Chowdhery et al. 2022, Table 1 and §2: 118 layers, d_model 18432, 48 heads of size
# 256, multi-query attention (one K/V head), SwiGLU with d_ff = 4·d_model, 256k vocabulary, shared
# input/output embedding, no biases, RoPE. PaLM uses "parallel" blocks with one LayerNorm per layer;
# perflab's blocks are serial with two, so this count is 18432 × 118 parameters (0.0004%) above
# PaLM's 540.35B. Megatron-LM shapes — Korthikanti et al. 2022, Table 3 (22B, 530B, 1T) with
# Megatron's padded vocabulary 51,200 and s = 2048: GPT-style (4h MLP, biases, learned positions, tied).
PRESETS.update({
    "palm-540b": ModelConfig("palm-540b", 118, 18432, 48, 1, 73728, True, 256000, 2048, True, False, "rotary", "layernorm", 256),
    "megatron-22b": ModelConfig("megatron-22b", 48, 6144, 64, None, 24576, False, 51200, 2048, True, True, "learned", "layernorm"),
    "mt-nlg-530b": ModelConfig("mt-nlg-530b", 105, 20480, 128, None, 81920, False, 51200, 2048, True, True, "learned", "layernorm"),
    "megatron-1t": ModelConfig("megatron-1t", 128, 25600, 160, None, 102400, False, 51200, 2048, True, True, "learned", "layernorm"),
})


def preset(name: str) -> ModelConfig:
    """A named shape; the error lists the known names."""
    key = name.strip().lower()
    if key not in PRESETS:
        raise InputError(f"unknown preset {name!r}: use one of {', '.join(PRESETS)}")
    return PRESETS[key]


# ---------------------------------------------------------------- exact parameter count


def param_breakdown(cfg: ModelConfig) -> dict[str, int]:
    """Parameters by component. Every term is a weight matrix (in × out) or a vector:

    embedding V·h; learned positions s·h; per layer: Q h·(a·d), K and V h·(kv·d) each, output
    (a·d)·h, MLP 2·h·f (3·h·f with GLU), biases where `bias`, two norms (2h each for LayerNorm with
    bias, h for RMSNorm); a final norm; the output layer V·h unless tied.
    """
    h, d, a, kv, f, L, V = cfg.hidden, cfg.d_head, cfg.heads, cfg.n_kv, cfg.d_ff, cfg.layers, cfg.vocab
    b = 1 if cfg.bias else 0
    norm = (2 if cfg.norm == "layernorm" and cfg.bias else 1) * h
    attn = h * a * d + 2 * h * kv * d + a * d * h + b * (a * d + 2 * kv * d + h)
    mlp = (3 if cfg.glu else 2) * h * f + b * ((2 if cfg.glu else 1) * f + h)
    return {
        "embedding": V * h,
        "positions": cfg.seq_len * h if cfg.positions == "learned" else 0,
        "attention": L * attn,
        "mlp": L * mlp,
        "norms": L * 2 * norm + norm,
        "output": 0 if cfg.tied else V * h,
    }


def param_count(cfg: ModelConfig) -> int:
    """Exact number of parameters of `build_model(cfg)`."""
    return sum(param_breakdown(cfg).values())


def non_embedding_params(cfg: ModelConfig) -> int:
    """Kaplan et al. 2020's N: parameters outside the token and position embeddings (and the
    output layer, which is an embedding-sized matrix)."""
    p = param_breakdown(cfg)
    return p["attention"] + p["mlp"] + p["norms"]


# ---------------------------------------------------------------- the PyTorch models


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def make_norm(cfg):
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.hidden)
    return nn.LayerNorm(cfg.hidden, bias=cfg.bias)


def rotary(x, cos, sin):
    # rotate pairs (x[..., :d/2], x[..., d/2:]) with real arithmetic (no complex numbers:
    # complex tensors break torch.compile graphs)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, a, kv, h = cfg.d_head, cfg.heads, cfg.n_kv, cfg.hidden
        self.q = nn.Linear(h, a * d, bias=cfg.bias)
        self.k = nn.Linear(h, kv * d, bias=cfg.bias)
        self.v = nn.Linear(h, kv * d, bias=cfg.bias)
        self.o = nn.Linear(a * d, h, bias=cfg.bias)

    def forward(self, x, rope=None):
        b, s, _ = x.shape
        c = self.cfg
        q = self.q(x).view(b, s, c.heads, c.d_head).transpose(1, 2)
        k = self.k(x).view(b, s, c.n_kv, c.d_head).transpose(1, 2)
        v = self.v(x).view(b, s, c.n_kv, c.d_head).transpose(1, 2)
        if rope is not None:
            cos, sin = rope
            q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        if c.n_kv != c.heads:
            rep = c.heads // c.n_kv
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, c.heads * c.d_head))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.glu = cfg.glu
        self.up = nn.Linear(cfg.hidden, cfg.d_ff, bias=cfg.bias)
        if cfg.glu:
            self.gate = nn.Linear(cfg.hidden, cfg.d_ff, bias=cfg.bias)
        self.down = nn.Linear(cfg.d_ff, cfg.hidden, bias=cfg.bias)

    def forward(self, x):
        if self.glu:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.norm1 = make_norm(cfg)
        self.attn = Attention(cfg)
        self.norm2 = make_norm(cfg)
        self.mlp = MLP(cfg)

    def forward(self, x, rope=None):
        x = x + self.attn(self.norm1(x), rope)
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    rope_cos: torch.Tensor  # buffers, registered when positions are rotary
    rope_sin: torch.Tensor

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.checkpointing = False
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.pos = nn.Embedding(cfg.seq_len, cfg.hidden) if cfg.positions == "learned" else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = make_norm(cfg)
        self.head = None if cfg.tied else nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.positions == "rotary":
            d = cfg.d_head
            inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
            ang = torch.outer(torch.arange(cfg.seq_len, dtype=torch.float32), inv)
            self.register_buffer("rope_cos", ang.cos(), persistent=False)
            self.register_buffer("rope_sin", ang.sin(), persistent=False)

    def forward(self, idx):
        b, s = idx.shape
        if s > self.cfg.seq_len:
            raise InputError(f"sequence length {s} exceeds the model's seq_len {self.cfg.seq_len}")
        x = self.embed(idx)
        if self.pos is not None:
            x = x + self.pos(torch.arange(s, device=idx.device))
        rope = None
        if self.cfg.positions == "rotary":
            rope = (self.rope_cos[:s].to(x.dtype), self.rope_sin[:s].to(x.dtype))
        for blk in self.blocks:
            if self.checkpointing and torch.is_grad_enabled():
                from torch.utils.checkpoint import checkpoint

                x = checkpoint(blk, x, rope, use_reentrant=False)
            else:
                x = blk(x, rope)
        x = self.norm(x)
        return x @ self.embed.weight.t() if self.head is None else self.head(x)


INITS = ("gpt2", "torch")


def build_model(cfg: ModelConfig, *, device=None, dtype=None, seed: int | None = 0, init: str = "gpt2") -> Transformer:
    """A decoder-only transformer for `cfg` (GPT-like or Llama-like by its fields).

    forward(idx: LongTensor[b, s]) -> logits[b, s, V]. Attention goes through
    `F.scaled_dot_product_attention` (causal). Set `model.checkpointing = True` to recompute each
    block in the backward pass (activation checkpointing). `seed` makes the initial weights
    reproducible without touching the global random state. `init`: 'gpt2' (`init_weights`, the
    default) or 'torch' (PyTorch's per-layer defaults, N(0, 1) embeddings: what lesson 00 shows
    going wrong).
    """
    if init not in INITS:
        raise InputError(f"unknown init {init!r}: use one of {', '.join(INITS)}")
    prepare = init_weights if init == "gpt2" else (lambda m: m)
    if seed is not None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = prepare(Transformer(cfg))
    else:
        model = prepare(Transformer(cfg))
    return model.to(device=device, dtype=dtype)


INIT_STD = 0.02  # GPT-2 and Llama alike (see init_weights)


@torch.no_grad()
def init_weights(model: Transformer) -> Transformer:
    """Initialise `model` in place as the architectures its presets name are initialised; returns it.

    - Every linear weight and every embedding (token, learned position): normal(0, 0.02); biases 0;
      norms' gains 1 and biases 0. GPT-2: `initializer_range = 0.02` (the GPT-2 code and Hugging
      Face's GPT2Config); Llama: the same `initializer_range = 0.02` (Hugging Face's LlamaConfig).
    - The two projections that write into the residual stream in every block (attention output,
      MLP down) get normal(0, 0.02/√(2·L)): Radford et al. 2019, §2.3, "scale the weights of residual
      layers at initialization by a factor of 1/√N where N is the number of residual layers"
      (2 per block), as nanoGPT does for `c_proj`, and as torchtitan's Llama scales its output
      projections with depth.

    torch's defaults (N(0, 1) for `nn.Embedding`) are what this replaces: with a tied embedding of
    unit scale, an untrained model's logits are so large that its softmax saturates, its loss is far
    from ln V and its gradients underflow into denormals, which slow many CPUs' matmuls tens of times
    (lesson 00, "denormals").
    """
    cfg = model.cfg
    resid_std = INIT_STD / math.sqrt(2 * cfg.layers)
    for mod in model.modules():
        if isinstance(mod, nn.Linear):
            nn.init.normal_(mod.weight, 0.0, INIT_STD)
            if mod.bias is not None:
                nn.init.zeros_(mod.bias)
        elif isinstance(mod, nn.Embedding):
            nn.init.normal_(mod.weight, 0.0, INIT_STD)
        elif isinstance(mod, (nn.LayerNorm, RMSNorm)):
            nn.init.ones_(mod.weight)
            bias = getattr(mod, "bias", None)
            if isinstance(bias, torch.Tensor):
                nn.init.zeros_(bias)
    for blk in model.blocks:
        assert isinstance(blk, Block)  # a Transformer's blocks are Blocks (build_model wraps none)
        nn.init.normal_(blk.attn.o.weight, 0.0, resid_std)
        nn.init.normal_(blk.mlp.down.weight, 0.0, resid_std)
    return model


# ---------------------------------------------------------------- presets side by side (lesson 02)


@dataclass(frozen=True)
class PresetTable:
    """Presets' shapes and parameter counts, each small one also built and its tensors counted (`preset_table`)."""

    configs: tuple[ModelConfig, ...]
    built: tuple[int | None, ...]  # sum(p.numel()) of the built model; None: too large to build here

    def shape_table(self):
        """The shape: layers, hidden, heads, K/V heads, MLP width, gated MLP, vocabulary, tied head."""
        import pandas as pd

        return pd.DataFrame([{"preset": c.name, "L": c.layers, "h": c.hidden, "a": c.heads, "kv": c.n_kv, "f": c.d_ff,
                              "GLU": c.glu, "V": c.vocab, "tied": c.tied} for c in self.configs]).set_index("preset")

    def count_table(self):
        """`param_count` beside the built model's own count, and the count by component."""
        import pandas as pd

        rows = []
        for c, built in zip(self.configs, self.built, strict=True):
            rows.append({"preset": c.name, "param_count": f"{param_count(c):,}",
                         "sum(p.numel()) of the built model": f"{built:,}" if built is not None else "too large to build here",
                         **{k: f"{v:,}" for k, v in param_breakdown(c).items()}})
        return pd.DataFrame(rows).set_index("preset")


def preset_table(names, *, build_below: float = 2e8) -> PresetTable:
    """The presets `names`, each with fewer than `build_below` parameters built on the CPU and its tensors counted."""
    cfgs = tuple(preset(n) for n in names)
    built = tuple(sum(p.numel() for p in build_model(c).parameters()) if param_count(c) < build_below else None
                  for c in cfgs)
    return PresetTable(cfgs, built)
