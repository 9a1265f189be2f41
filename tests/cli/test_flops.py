"""The `perflab flops` command: its output, its JSON, and one line for bad input."""

import json
import subprocess
import sys

import pytest
from clirun import perflab

from perflab.flops.transformer import CONVENTIONS, flops_per_token
from perflab.workload.models import preset

LLAMA2_7B_SHAPE = ["--layers", "32", "--hidden", "4096", "--heads", "32", "--vocab", "32000", "--ffn", "11008",
                   "--glu", "--rotary", "--no-bias"]


def run(*args):
    r = perflab(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_reader_that_stops_early_is_no_error():
    """`perflab ... | head`: the pipe closes before the output is written; no traceback, status 0."""
    proc = subprocess.Popen([sys.executable, "-m", "perflab", "flops", "--preset", "llama2-7b"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before perflab prints anything
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err


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


def test_shape_flags_give_the_exact_llama2_7b_count_in_both_commands():
    flops = run("flops", *LLAMA2_7B_SHAPE)
    mem = run("memory", *LLAMA2_7B_SHAPE, "--precision", "bf16", "--optimizer", "sgd")
    assert flops["params"] == 6_738_415_616  # the released checkpoint's count
    assert mem["model"]["ffn"] == 11008 and mem["components_bytes"]["weights"] == 2 * 6_738_415_616
