"""The `perflab memory` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

import json

from clirun import perflab


def test_memory_preset_with_new_heads_and_a_shape_without_batch():
    r = perflab("memory", "--preset", "tiny-gpt", "--seq", "4096", "--heads", "8", "--json")
    assert r.returncode == 0, r.stderr
    model = json.loads(r.stdout)["model"]
    # more heads, same hidden size: the preset's K/V heads follow the new head count (no GQA left over)
    assert model["heads"] == 8 and model["kv_heads"] == 8 and model["seq_len"] == 4096
    # a shape and --seq but no --batch: activations for one sequence
    r = perflab("memory", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "128", "--json")
    assert r.returncode == 0, r.stderr
    one = json.loads(r.stdout)
    r2 = perflab("memory", "--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "128", "--batch", "1", "--json")
    assert one["components_bytes"]["activations"] == json.loads(r2.stdout)["components_bytes"]["activations"] > 0
