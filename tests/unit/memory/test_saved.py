"""Tests of `perflab.memory.saved`: what the forward keeps for the backward, against the estimate."""

from __future__ import annotations

import pytest

from perflab.memory import probe, saved
from perflab.workload.models import preset


def test_the_probe_re_exports_the_saved_tensors():
    assert probe.saved_tensors is saved.saved_tensors and probe.SavedTensors is saved.SavedTensors


@pytest.mark.parametrize("name", ["tiny-gpt", "tiny-llama"])
def test_autograd_saves_what_the_estimate_predicts_to_the_byte_on_a_cpu(name):
    check = saved.activation_check(preset(name), 2, device="cpu")
    assert check.saved.total_bytes + 4 == check.predicted_bytes  # the scalar loss is the only storage not seen
    assert f"= {check.predicted_bytes:,} bytes (predicted {check.predicted_bytes:,})" in check.text()
    parts = check.parts_table()
    assert list(parts.columns) == ["per layer", "bytes"] and "MLP" in set(parts["per layer"])
    shapes = check.by_shape()
    assert list(shapes.columns) == ["shape", "dtype", "storages", "bytes each", "bytes in all"] and len(shapes) <= 12
    paper = check.paper_table()
    assert list(paper["per layer"])[0] == "Korthikanti eq. 1, ×2 for fp32" and list(paper.columns) == ["per layer", "MiB"]
