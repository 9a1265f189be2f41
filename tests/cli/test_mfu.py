"""The `perflab mfu` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

import json

import pytest
from clirun import perflab


def test_mfu_palm_from_the_papers_inputs():
    """PaLM 540B (Chowdhery et al. 2022 §4.1 and App. B): 238.3K tokens/s, N = 540.35B, L = 118, H = 48,
    Q = 256, T = 2048, 6144 TPU v4 at 275 TFLOP/s → MFU 46.2%."""
    r = perflab("mfu", "--tokens-per-s", "238300", "--params", "540.35e9", "--layers", "118", "--heads", "48",
                "--head-dim", "256", "--seq", "2048", "--devices", "6144", "--peak", "275", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert int(d["mfu"] * 1000) / 1000 == 0.462
    assert d["achieved_tflops"] == pytest.approx(0.462289 * 275, rel=1e-4)


def test_mfu_accelerator_and_hfu():
    r = perflab("mfu", "--preset", "gpt2-small", "--tokens-per-s", "400000", "--accelerator", "h100-sxm",
                "--checkpointing", "--json")
    d = json.loads(r.stdout)
    assert d["peak_tflops"] == 989.4 and d["hfu"] > d["mfu"] > 0
    s = perflab("mfu", "--step-time", "2", "--batch", "8", "--seq", "1024", "--flops-per-token", "1e9", "--peak", "100", "--json")
    assert json.loads(s.stdout)["tokens_per_s"] == 4096


def test_mfu_measure_here():
    r = perflab("mfu", "--measure", "--preset", "tiny-gpt", "--batch", "2", "--seq", "32", "--steps", "2", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["mfu"] is None or d["mfu"] > 0
    assert d["achieved_tflops"] > 0 and d["counted_flops_per_step"] == d["hardware_flops_per_step"]


def test_a_sequence_longer_than_the_preset_stretches_its_context():
    d = json.loads(perflab("flops", "--preset", "tiny-gpt", "--seq", "4096", "--json").stdout)
    assert d["seq"] == 4096 and d["config"]["seq_len"] == 4096 and d["tokens_per_step"] == 4096
    r = perflab("mfu", "--tokens-per-s", "1000", "--preset", "tiny-gpt", "--seq", "4096", "--peak", "100", "--json")
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout)
    assert m["flops_counted_as"] == "exact for tiny-gpt at s=4096"
    assert m["achieved_tflops"] == pytest.approx(1000 * d["flops_per_token"]["exact"] / 1e12)
