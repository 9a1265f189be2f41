"""The `perflab mamf` command: its output, its JSON, and one line for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import perflab

from .helpers import _one_line_error

HOURS = ["--hours", "1", "--gpus", "8", "--mtbf-hours", "100", "--ckpt-minutes", "1"]


MAMF_CPU = ["--dtype", "fp32", "--device", "cpu", "--warmup-ms", "1", "--rep-ms", "2"]


def _landscape(p):
    v = p["m"] * p["n"] * p["k"] / 1e6
    return {"mean_tflops": v, "median_tflops": v, "max_tflops": v}


def _search_with(monkeypatch, measure):
    from perflab.gemm import mamf

    real = mamf.search
    monkeypatch.setattr(mamf, "search", lambda *a, **kw: real(*a, **{**kw, "measure": measure}))


RANGES = ["--m-range", "16", "64", "16", "--n-range", "16", "64", "16", "--k-range", "16", "64", "16"]


@pytest.mark.parametrize("args,needle", [
    (["--m-range", "0", "96", "32"], "give all three ranges"),
    (["--m-range", "64", "32", "8", "--n-range", "8", "8", "8", "--k-range", "8", "8", "8"], "empty"),
    (["--m-range", "8", "8", "0", "--n-range", "8", "8", "8", "--k-range", "8", "8", "8"], "step"),
    (["--m-range", "8", "x", "8"], "whole number"),
    (["--dtype", "tf32", "--device", "cpu"], "fp32"),
    (["--m-range", "1000000", "1000000", "1", "--n-range", "1000000", "1000000", "1", "--k-range", "1000000",
      "1000000", "1", "--dtype", "fp32", "--device", "cpu"], "choose smaller"),
])
def test_mamf_bad_input_one_line(args, needle):
    r = perflab("mamf", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr


@pytest.mark.parametrize("args,needle", [
    (["flops", "--preset", "tiny-gpt", "--layers", "2.5"], "expected a whole number ≥ 1, got '2.5'"),
    (["dataloader", "--io-ms", "abc"], "expected a number of milliseconds ≥ 0, got 'abc'"),
    (["dataloader", "--transform-ms", "-1"], "must be ≥ 0 ms (got -1)"),
    (["dataloader", "--workers", "x"], "expected a whole number of workers ≥ 0, got 'x'"),
    (["dataloader", "--compute-ms", "0"], "--compute-ms must be > 0"),
    (["ettr", *HOURS, "--restart-minutes", "abc"], "expected a number ≥ 0, got 'abc'"),
    (["ettr", *HOURS, "--restart-minutes", "-2"], "must be a number ≥ 0 (got -2)"),
    (["mamf", "--m-range", "1", "-1", "1"], "must be ≥ 0 (got -1)"),
    (["memory", "--preset", "tiny-gpt", "--checkpointing"], "add --measure"),
    (["memory", "--params", "7e9", "--gpus", "8", "--gas", "2", "--gbs", "64"], "give --gas or --gbs, not both"),
    (["memory", "--params", "7e9", "--gpus", "8", "--dp", "3"], "--dp 3 disagrees with --gpus 8/(tp·pp = 1) = 8"),
    (["memory", "--measure", "--preset", "tiny-gpt", "--precision", "mixed"], "give --precision fp32 or bf16"),
    (["memory", "--measure", "--preset", "tiny-gpt", "--recompute", "full"], "takes --checkpointing"),
    (["numa", "--nproc", "2"], "--nproc goes with --plan"),
    (["profile", "--steps", "51"], "--steps 51 is more than 50"),
    (["shard", "--microbatches", "a,b"], "expected whole numbers separated by commas, got 'a,b'"),
    (["shuffle", "--n", "10", "--seed", "x"], "expected a whole number ≥ 0, got 'x'"),
    (["shuffle", "--n", "10", "--start", "-1"], "must be ≥ 0 (got -1)"),
    (["shuffle", "--n", "10", "--start", "10"], "--start 10 is past the end (n = 10)"),
    (["mfu", "--tokens-per-s", "1000", "--preset", "tiny-gpt", "--device", "cpu", "--dtype", "fp8"],
     "this device's fp8 peak is unknown: give --peak or --accelerator"),
])
def test_bad_input_is_one_line_with_status_2(args, needle):
    _one_line_error(perflab(*args), needle)


def test_mamf_smoke_ranges_and_fresh_sets_the_old_results_aside(monkeypatch, tmp_path):
    _search_with(monkeypatch, _landscape)  # a model landscape in place of the timing: the flags are under test
    env = {"PERFLAB_RESULTS": str(tmp_path)}
    r = perflab("mamf", "--smoke", *MAMF_CPU, "--json", env=env)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["ranges"] == {ax: [64, 256, 4] for ax in "mnk"}
    assert (d["best"]["m"], d["best"]["n"], d["best"]["k"]) == (256, 256, 256)
    first = Path(d["results_file"])
    assert first.is_file() and d["measured"] == d["evaluated"] > 0
    again = json.loads(perflab("mamf", "--smoke", *MAMF_CPU, "--json", env=env).stdout)
    assert again["measured"] == 0  # resumed: nothing measured twice
    r = perflab("mamf", "--smoke", "--fresh", *MAMF_CPU, "--json", env=env)
    assert r.returncode == 0, r.stderr
    fresh = json.loads(r.stdout)
    assert fresh["measured"] == fresh["evaluated"] == d["evaluated"]  # set aside: every shape measured again
    kept = list(first.parent.glob(f"{first.stem}.*.jsonl"))
    assert len(kept) == 1 and kept[0].read_text().count("\n") == d["evaluated"]


def test_mamf_says_when_no_shape_could_be_measured(monkeypatch, tmp_path):
    def fails(p):
        raise RuntimeError(f"no kernel for {p['m']}x{p['n']}x{p['k']}")

    _search_with(monkeypatch, fails)
    r = perflab("mamf", *RANGES, *MAMF_CPU, env={"PERFLAB_RESULTS": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("no shape could be measured (") and "tried): see " in r.stdout


def test_mamf_interrupted_says_how_to_resume(monkeypatch, tmp_path):
    calls = {"n": 0}

    def stops(p):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt  # the learner presses stop mid-search
        return _landscape(p)

    _search_with(monkeypatch, stops)
    r = perflab("mamf", *RANGES, *MAMF_CPU, env={"PERFLAB_RESULTS": str(tmp_path)})
    assert r.returncode == 130, r.stderr
    assert r.stdout.rstrip().endswith("interrupted: run the same command again to resume")
