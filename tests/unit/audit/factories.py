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


# ---------------------------------------------------------------- outside architectures (counting)

DEEPSEEK_V3 = {"num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64, "moe_intermediate_size": 16,
               "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1,
               "num_attention_heads": 2, "num_key_value_heads": 2, "kv_lora_rank": 8, "q_lora_rank": 16,
               "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 8, "vocab_size": 64,
               "max_position_embeddings": 64, "n_group": 1, "topk_group": 1}
QWEN2_MOE = {"num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64, "moe_intermediate_size": 16,
             "shared_expert_intermediate_size": 48, "num_experts": 4, "num_experts_per_tok": 2,
             "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 64, "max_position_embeddings": 64}
BART = {"encoder_layers": 2, "decoder_layers": 2, "d_model": 32, "encoder_attention_heads": 2,
        "decoder_attention_heads": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "vocab_size": 64,
        "max_position_embeddings": 64, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
        "decoder_start_token_id": 2}
ENC_SEQ, DEC_SEQ = 16, 8


def bart():
    """BART with its encoder reading 16 tokens and its decoder 8 (the labels), as a summariser trains."""
    import transformers

    torch.manual_seed(0)
    model = transformers.BartForConditionalGeneration(transformers.CONFIG_MAPPING["bart"](**BART))
    g = torch.Generator().manual_seed(0)
    batches = [{"input_ids": torch.randint(3, 64, (BATCH, ENC_SEQ), generator=g),
                "labels": torch.randint(3, 64, (BATCH, DEC_SEQ), generator=g)} for _ in range(8)]
    return {"model": model, "batches": batches}


def depthwise():
    """A MobileNet-style block: a depthwise 3×3 convolution (groups = channels) and a pointwise one."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1, groups=16),
                          nn.ReLU(), nn.Conv2d(16, 32, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    batches = [(torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))) for _ in range(8)]
    return {"model": model, "batches": batches}


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(12, 24, num_layers=2, batch_first=True)
        self.out = nn.Linear(24, 5)

    def forward(self, x):
        return self.out(self.lstm(x)[0]).mean(dim=1)


def lstm():
    torch.manual_seed(0)
    return {"model": Tagger(), "batches": [(torch.randn(4, 10, 12), torch.randint(0, 5, (4,))) for _ in range(8)]}


def _opaque_mm():
    """A library's own kernel (a custom op outside torch's namespaces): a product the counter has no formula for."""
    try:
        return torch.ops.perflab_audit_test.opaque_mm
    except (AttributeError, RuntimeError):
        pass

    @torch.library.custom_op("perflab_audit_test::opaque_mm", mutates_args=())
    def opaque_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b

    @opaque_mm.register_fake
    def _(a, b):
        return a.new_empty(a.shape[0], b.shape[1])

    def setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return torch.ops.perflab_audit_test.opaque_mm(grad, b.t()), torch.ops.perflab_audit_test.opaque_mm(a.t(), grad)

    opaque_mm.register_autograd(backward, setup_context=setup)
    return torch.ops.perflab_audit_test.opaque_mm


class OpaqueHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(12, 5) / 4)

    def forward(self, x):
        return _opaque_mm()(x, self.w)


def custom_kernel():
    torch.manual_seed(0)
    return {"model": OpaqueHead(), "batches": [(torch.randn(4, 12), torch.randint(0, 5, (4,))) for _ in range(8)]}


class Pixels(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        return self.head(self.conv(x.float() / 255).relu().mean(dim=(2, 3)))


def uint8_images():
    """Images as a decoder gives them: uint8 pixels, [batch, channels, height, width]."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    return {"model": Pixels(), "batches": [(torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8, generator=g),
                                            torch.randint(0, 10, (4,), generator=g)) for _ in range(8)]}


def float64():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4)).double()
    return {"model": model, "batches": [(torch.randn(16, 64, dtype=torch.float64), torch.randint(0, 4, (16,)))
                                        for _ in range(8)]}


# ---------------------------------------------------------------- more bad input


def nan_loss():
    return {"model": nn.Linear(16, 4), "batches": [torch.randn(2, 16)],
            "loss_fn": lambda m, b: m(b).sum() * float("nan")}


def one_shot():
    def gen():
        for _ in range(3):
            yield torch.randn(2, 16), torch.zeros(2, dtype=torch.long)
    return {"model": nn.Linear(16, 4), "batches": gen()}


def endless():
    def gen():
        while True:
            yield torch.randn(2, 16), torch.zeros(2, dtype=torch.long)
    return {"model": nn.Linear(16, 4), "batches": gen()}


def never_returns():
    time.sleep(60)  # a factory waiting on something that never comes
