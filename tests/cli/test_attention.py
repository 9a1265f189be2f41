"""`perflab attention`: bytes predicted and counted for both paths, FLOPs, the compiled kernel, --run; bad input exits 2."""

import json

import pytest
from clirun import perflab

from perflab.gemm import triton_matmul as tm

needs_triton = pytest.mark.skipif(not tm.available(), reason=f"{tm.unavailable_reason()}")


@needs_triton
def test_counts_and_compiles_and_runs():
    r = perflab("attention", "--seq", "100", "--heads", "1", "--causal", "--block-n", "32", "--run", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["flash_bytes_counted"] == out["flash_bytes"]
    assert out["eager_bytes_counted"] > out["standard_scores_bytes"] > 0
    assert out["max_abs_err"] <= out["run_tolerance"] and out["run_passed"]
    assert out["compiled"]["target"] == "sm_90" and out["compiled"]["registers"] > 0
    assert out["backward_flops_recompute"] == 2.5 * out["forward_flops"]


@needs_triton
def test_text_names_both_paths():
    r = perflab("attention", "--seq", "64", "--heads", "1", "--no-compile")
    assert r.returncode == 0, r.stderr
    assert "fused (FlashAttention): predicted" in r.stdout and "counted" in r.stdout and "standard:" in r.stdout


@pytest.mark.parametrize("args", [["--head-dim", "80"], ["--block-m", "48"], ["--seq", "0"], ["--dtype", "fp32"],
                                  ["--target", "sm_50"], ["--target", "sm_75"], ["--target", "sm_100"]])
def test_bad_input_is_one_line_exit_2(args):
    r = perflab("attention", "--seq", "32", "--heads", "1", *args)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_help_has_a_description_and_offers_only_what_runs():
    r = perflab("attention", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "Lesson 13's FlashAttention forward" in text
    assert "fp32" not in text.replace("accumulates in fp32", "")  # fp32 inputs are refused, so not offered
    assert "{sm_90,sm_80}" in text
