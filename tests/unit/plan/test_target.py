"""Tests of `perflab.plan.target`: what the plan builds, on `meta`, set up as a GPU's training step."""

from __future__ import annotations

from typing import Any

import pytest

from perflab.core.errors import InputError
from perflab.plan import target

SMALL = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 256}


def test_a_key_the_config_does_not_know_is_refused_with_the_keys_it_has():
    """`num_hidden_layer=2` (or GPT-2's `n_layer`) on a Llama config would be kept and never read."""
    pytest.importorskip("transformers")
    for bad in ("num_hidden_layer", "n_layer"):
        with pytest.raises(InputError, match=rf"--hf-set {bad}: not a key of the llama config .*num_hidden_layers"):
            target.hf_override_keys("llama", {bad: 2})
    target.hf_override_keys("llama", SMALL)  # every key known: no error
    target.hf_override_keys("gpt2", {"n_layer": 2})  # an attribute-map alias of num_hidden_layers


def test_a_config_is_built_on_meta_without_the_kv_cache_and_with_causal_attention_in_the_kernel():
    """The KV cache off (with it on, `--ac full` appended the recompute's keys: +729 GB for 70B), and
    attention through SDPA with is_causal instead of an s × s mask."""
    pytest.importorskip("transformers")
    import torch

    with torch.device("meta"):
        t = target.from_hf("llama", SMALL, batch=2, seq=16)
    assert all(p.device.type == "meta" for p in t.model.parameters())
    found = target.find_blocks(t.model)
    assert found is not None and found[0].endswith("layers") and len(found[1]) == 2
    target.training_setup(t.model)
    cfg: Any = t.model.config
    assert cfg.use_cache is False and cfg._attn_implementation == target.ATTN


def test_a_factory_runs_on_meta_on_its_own_thread(tmp_path):
    """A device context is per thread: the factory's thread enters `meta` itself, so a model too big for
    this machine is never allocated (a 530B-wide model was OOM-killed before)."""
    f = tmp_path / "big.py"
    f.write_text("import torch\n\ndef build():\n    return {'model': torch.nn.Linear(200_000, 200_000), "
                 "'batches': [torch.zeros(1, 200_000)]}\n")
    t = target.from_factory_on_meta(f"{f}:build", timeout_s=60)
    assert next(t.model.parameters()).device.type == "meta"
    with pytest.raises(InputError, match="TARGET wants path/to/file.py:FACTORY"):
        target.from_factory_on_meta("no-colon", timeout_s=5)
