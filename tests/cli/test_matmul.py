"""The `perflab matmul` command: its output, its JSON, and one line for bad input."""

import json

import pytest
import torch
from clirun import perflab


def test_matmul_json():
    r = perflab("matmul", "--m", "128", "--n", "96", "--k", "64", "--dtype", "float32", "--json", "--rep-ms", "20")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["m"] == 128 and d["n"] == 96 and d["k"] == 64 and d["dtype"] == "fp32"
    assert d["median_s"] > 0 and d["tflops"] == pytest.approx(2 * 128 * 96 * 64 / d["median_s"] / 1e12)
    assert "peak_fraction" in d and (d["peak_fraction"] is None or d["peak_fraction"] > 0)
    assert d["rel_error"] < 1e-4


@pytest.mark.parametrize("args,needle", [
    (["--m", "0", "--n", "8", "--k", "8"], "≥ 1"),
    (["--m", "-4", "--n", "8", "--k", "8"], "≥ 1"),
    (["--m", "abc", "--n", "8", "--k", "8"], "whole number"),
    (["--m", "8", "--n", "8", "--k", "8", "--dtype", "int3"], "unknown dtype"),
    (["--m", "8", "--n", "8", "--k", "8", "--dtype", "fp8"] if not torch.cuda.is_available() else
     ["--m", "8", "--n", "8", "--k", "17", "--dtype", "fp8"], "fp8"),
    (["--m", "300000", "--n", "300000", "--k", "300000"], "choose smaller"),
    (["--m", "8", "--n", "8"], "required"),
    (["--m", "8", "--n", "8", "--k", "8", "--device", "tpu"], "unknown device"),
])
def test_bad_arguments_one_line_no_traceback(args, needle):
    r = perflab("matmul", *args)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert needle in err, err


def test_tf32_on_cpu_says_what_to_use():
    if torch.cuda.is_available():
        pytest.skip("this GPU may support tf32")
    r = perflab("matmul", "--m", "8", "--n", "8", "--k", "8", "--dtype", "tf32")
    assert r.returncode == 2 and "use fp32" in r.stderr and len(r.stderr.strip().splitlines()) == 1
