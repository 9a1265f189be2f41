"""The `perflab waves` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

import json

import pytest
from clirun import perflab


def test_waves_json_reproduces_the_guide_example():
    """NVIDIA Matrix Multiplication Background guide §3.2: M=2304, K=4096, 256×128 tiles, 108 SMs."""
    r = perflab("waves", "--m", "2304", "--n", "1536", "--k", "4096", "--sms", "108", "--tile", "256x128", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["tiles"], d["waves"], d["utilization"]) == (108, 1, 1.0)
    assert d["arithmetic_intensity"] == pytest.approx(2 * 2304 * 1536 * 4096 / ((2304 * 4096 + 4096 * 1536 + 2304 * 1536) * 2))
    r = perflab("waves", "--m", "2304", "--n", "1664", "--k", "4096", "--gpu", "a100-sxm-80gb", "--json")
    d = json.loads(r.stdout)
    assert (d["tiles"], d["waves"], d["sms"]) == (117, 2, 108) and d["utilization"] == pytest.approx(117 / 216)
    assert d["roofline"]["bound"] == "compute-bound" and d["roofline"]["predicted_tflops"] == pytest.approx(312 * 117 / 216)
    assert d["alignment"]["arch"] == "ampere" and all(c["ok_recommended"] for c in d["alignment"]["checks"])


def test_waves_text_names_its_sources():
    r = perflab("waves", "--m", "4096", "--n", "10922", "--k", "4096", "--gpu", "h100-sxm", "--dtype", "bf16")
    assert r.returncode == 0, r.stderr
    assert "132 SMs" in r.stdout and "10880 or 10944" in r.stdout and "FLOPs/byte" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["--m", "0", "--n", "8", "--k", "8", "--sms", "4"], "≥ 1"),
    (["--m", "8", "--n", "8", "--k", "8", "--sms", "4", "--tile", "0x128"], "≥ 1"),
    (["--m", "8", "--n", "8", "--k", "8", "--sms", "4", "--tile", "big"], "256x128"),
    (["--m", "8", "--n", "8", "--k", "8", "--gpu", "tpu9"], "unknown GPU"),
    (["--m", "8", "--n", "8", "--k", "8", "--sms", "4", "--dtype", "int3"], "unknown dtype"),
])
def test_waves_bad_input_one_line(args, needle):
    r = perflab("waves", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr


def test_waves_without_a_gpu_asks_for_sms():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: --sms defaults to its SM count")
    r = perflab("waves", "--m", "8", "--n", "8", "--k", "8")
    assert r.returncode == 2 and "--sms" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_waves_says_when_the_gpu_has_no_mode_for_the_dtype():
    r = perflab("waves", "--m", "1024", "--n", "1024", "--k", "1024", "--gpu", "a100-sxm-80gb", "--dtype", "fp8")
    assert r.returncode == 0, r.stderr
    assert "NVIDIA A100 SXM 80GB has no dense fp8 mode: no roofline" in r.stdout
