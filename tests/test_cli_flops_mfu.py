"""`perflab flops` and `perflab mfu`: JSON schema, a published case from its paper's inputs, one-line errors."""

import json

import pytest
from clirun import perflab

from perflab.flops.transformer import CONVENTIONS, flops_per_token
from perflab.workload.models import preset


def test_flops_json_preset():
    r = perflab("flops", "--preset", "llama2-7b", "--seq", "4096", "--batch", "2", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d["flops_per_token"]) == set(CONVENTIONS)
    assert d["params"] == 6_738_415_616
    want = flops_per_token(preset("llama2-7b"), 4096)
    for k in CONVENTIONS:
        assert d["flops_per_token"][k] == pytest.approx(want[k])
        assert d["flops_per_step"][k] == pytest.approx(want[k] * 2 * 4096)


def test_flops_from_flags_matches_preset():
    flags = ["--layers", "12", "--hidden", "768", "--heads", "12", "--ffn", "3072", "--vocab", "50257", "--seq", "1024", "--tied"]
    a = json.loads(perflab("flops", *flags, "--json").stdout)
    b = json.loads(perflab("flops", "--preset", "gpt2-small", "--json").stdout)
    assert a["params"] == b["params"] == 124_439_808
    assert a["flops_per_token"] == b["flops_per_token"]
    g = json.loads(perflab("flops", "--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--glu",
                           "--vocab", "100", "--seq", "32", "--json").stdout)
    assert g["config"]["glu"] is True and g["config"]["kv_heads"] == 2 and g["config"]["tied"] is False


def test_flops_text():
    r = perflab("flops", "--preset", "gpt2-small")
    assert r.returncode == 0 and "PaLM" in r.stdout and "Narayanan" in r.stdout and "mlp_down" in r.stdout


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


@pytest.mark.parametrize("args,needle", [
    (["flops", "--layers", "2", "--hidden", "64"], "missing --heads"),
    (["flops", "--preset", "gpt-9"], "unknown preset"),
    (["flops", "--preset", "tiny-gpt", "--hidden", "130"], "divisible"),
    (["flops", "--layers", "0", "--hidden", "64", "--heads", "4", "--vocab", "10"], "≥ 1"),
    (["mfu", "--tokens-per-s", "0", "--flops-per-token", "5", "--peak", "1"], "positive"),
    (["mfu", "--tokens-per-s", "10", "--flops-per-token", "5", "--accelerator", "tpu9"], "unknown accelerator"),
    (["mfu", "--tokens-per-s", "10", "--params", "1e9", "--peak", "1"], "needs --layers"),
    (["mfu", "--flops-per-token", "5", "--peak", "1"], "--tokens-per-s"),
    (["mfu", "--tokens-per-s", "10", "--peak", "1"], "--flops-per-token"),
    (["mfu", "--measure"], "--preset"),
    (["mfu", "--tokens-per-s", "10", "--preset", "tiny-gpt", "--convention", "nope", "--peak", "1"], "unknown convention"),
])
def test_bad_arguments_one_line(args, needle):
    r = perflab(*args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert needle in err, err
