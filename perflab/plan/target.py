"""What `perflab plan` builds: the target (a factory, or a Hugging Face config), on `meta`, set up as a
training step on a GPU runs it.

* **A factory** (`path/to/file.py:FACTORY` or `module:FACTORY`, as `perflab audit` takes it) is called on
  the worker thread that gives up after `--factory-timeout` (`perflab.audit.target.call_within`), inside
  `torch.device("meta")` on that thread: a device context is per thread, so one entered by the caller
  would not reach the factory, and a model too big for this machine would be allocated for real.
* **A Hugging Face config** (`--hf-config`, `--hf-set KEY=VALUE`): an override the config does not know
  is refused in one line that lists the keys it does know (`CONFIG_MAPPING[type](**overrides)` keeps a
  misspelt key, `num_hidden_layer=2` or GPT-2's `n_layer=2` on a Llama config, as an attribute nothing
  reads, while the plan's title would show it).
* **Set up as a training step** (`training_setup`): the KV cache off (`use_cache=False`); and attention
  through torch's SDPA with the causal mask left to the kernel (`is_causal=True`), as transformers does on
  a GPU for a batch without padding (`masking_utils._ignore_causal_mask_sdpa`). On fake tensors
  transformers cannot read the position ids (its check for packed sequences), so it would build the s × s
  mask and send attention to a kernel that takes one; the plan's batch is unpadded and unpacked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from perflab.core.errors import InputError

ATTN = "perflab_causal_sdpa"  # the attention implementation registered with transformers for the plan


def hf_override_keys(type_or_path: str, overrides: Mapping[str, Any]) -> None:
    """Refuse an override the model's config would keep as an unused attribute (a key it neither has nor
    consumes, as `rope_theta` is consumed into `rope_parameters`), in one line listing the keys it has."""
    from perflab.audit.target import hf_config

    _transformers()
    plain, given = hf_config(type_or_path), hf_config(type_or_path, overrides)
    known = set(plain.to_dict()) | set(getattr(plain, "attribute_map", {}) or {})
    kept = set(given.to_dict())
    unknown = sorted(k for k in overrides if k in kept and k not in known)
    if unknown:
        kind = getattr(plain, "model_type", type_or_path)
        raise InputError(f"--hf-set {', '.join(unknown)}: not a key of the {kind} config (it would be kept and "
                         f"never read), which has {', '.join(sorted(k for k in known if not k.startswith('_')))}")


def from_hf(type_or_path: str, overrides: Mapping[str, Any] | None = None, *, batch: int = 1, seq: int = 2048):
    """A plan's target from a Hugging Face config (overrides checked), with one batch of `batch` × `seq`."""
    from perflab.audit.target import from_hf_config

    hf_override_keys(type_or_path, overrides or {})
    return from_hf_config(type_or_path, overrides, batch=batch, seq=seq, n_batches=1)


def _transformers() -> None:
    """transformers, or one line naming the command that needs it and the extra that installs it (set up as
    `perflab.audit.target` sets it up: offline, its warnings kept off stderr)."""
    import os

    from perflab.core.extras import need

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

    need("transformers", "audit", "perflab plan --hf-config builds Hugging Face models from their configs "
                                  "(make lab installs the course without it)")


def from_factory_on_meta(spec: str, timeout_s: float, progress: Callable[[str], None] | None = None):
    """A plan's target from a factory, called on `meta` on the thread that runs it (module docstring)."""
    from perflab.audit.target import from_factory

    return from_factory(spec, timeout_s=timeout_s, progress=progress, device="meta")


def find_blocks(model: torch.nn.Module) -> tuple[str, torch.nn.ModuleList] | None:
    """The model's repeated blocks: the ModuleList of at least two modules of one type holding the most
    parameters (`blocks`, `layers`, `h`, ...)."""
    best = None
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) >= 2 and len({type(x) for x in m}) == 1:
            n = sum(p.numel() for p in m.parameters())
            if best is None or n > best[0]:
                best = (n, name, m)
    return (best[1], best[2]) if best else None


def training_setup(model: torch.nn.Module) -> None:
    """A Hugging Face model set up as a training step on a GPU runs it (module docstring)."""
    cfg = getattr(model, "config", None)
    if cfg is None:
        return
    if getattr(cfg, "use_cache", False):
        cfg.use_cache = False
    if getattr(cfg, "_attn_implementation", None) == "sdpa" and hasattr(model, "set_attn_implementation"):
        _register()
        model.set_attn_implementation(ATTN)  # pyright: ignore[reportCallIssue]


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def causal_mask(*args, **kwargs):
        """transformers' SDPA mask, except that an unpadded causal batch gets none (is_causal=True)."""
        plain = (kwargs.get("attention_mask") is None and kwargs.get("local_size") is None
                 and kwargs.get("q_length") == kwargs.get("kv_length") and not isinstance(kwargs.get("q_offset"), torch.Tensor)
                 and kwargs.get("q_offset", 0) == 0 and kwargs.get("kv_offset", 0) == 0)
        return None if plain else sdpa_mask(*args, **kwargs)

    AttentionInterface.register(ATTN, sdpa_attention_forward)
    AttentionMaskInterface.register(ATTN, causal_mask)
