"""The CLI's error branches and less common paths: each bad input is one line with exit status 2,
each optional flag does what its help says. In-process runs (tests/clirun.py), tiny sizes."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
from clirun import perflab

from perflab.commands import _args


def _one_line_error(r, needle: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr, r.stderr


HOURS = ["--hours", "1", "--gpus", "8", "--mtbf-hours", "100", "--ckpt-minutes", "1"]


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


def test_positive_int_takes_whole_exponents_only():
    assert _args.positive_int("1e3") == 1000 and _args.positive_int("4_096") == 4096
    with pytest.raises(argparse.ArgumentTypeError, match="whole number ≥ 1, got '2.5'"):
        _args.positive_int("2.5")


def test_json_writes_nan_and_inf_as_null(capsys):
    _args.emit({"a": math.nan, "b": [math.inf, 1.5]}, True)
    assert json.loads(capsys.readouterr().out) == {"a": None, "b": [None, 1.5]}


def test_numa_refuses_a_folder_that_is_not_sys(tmp_path):
    _one_line_error(perflab("numa", "--sysfs", str(tmp_path)), "no devices/system folder there")


def test_numa_plan_without_gpus_asks_for_nproc(tmp_path):
    (tmp_path / "devices" / "system" / "node").mkdir(parents=True)  # a /sys with no node and no PCI GPU
    _one_line_error(perflab("numa", "--plan", "--sysfs", str(tmp_path)), "no GPU found to plan for: give --nproc N")


def test_a_sequence_longer_than_the_preset_stretches_its_context():
    d = json.loads(perflab("flops", "--preset", "tiny-gpt", "--seq", "4096", "--json").stdout)
    assert d["seq"] == 4096 and d["config"]["seq_len"] == 4096 and d["tokens_per_step"] == 4096
    r = perflab("mfu", "--tokens-per-s", "1000", "--preset", "tiny-gpt", "--seq", "4096", "--peak", "100", "--json")
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout)
    assert m["flops_counted_as"] == "exact for tiny-gpt at s=4096"
    assert m["achieved_tflops"] == pytest.approx(1000 * d["flops_per_token"]["exact"] / 1e12)


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


def test_shuffle_measure_times_the_whole_permutation():
    r = perflab("shuffle", "--n", "100", "--measure")
    assert r.returncode == 0, r.stderr
    assert "whole permutation:" in r.stdout and "MB (tracemalloc)" in r.stdout
    d = json.loads(perflab("shuffle", "--n", "100", "--measure", "--json").stdout)
    assert sorted(d["indices"]) == list(range(100)) and d["peak_bytes"] > 0 and d["seconds"] > 0


def test_waves_says_when_the_gpu_has_no_mode_for_the_dtype():
    r = perflab("waves", "--m", "1024", "--n", "1024", "--k", "1024", "--gpu", "a100-sxm-80gb", "--dtype", "fp8")
    assert r.returncode == 0, r.stderr
    assert "NVIDIA A100 SXM 80GB has no dense fp8 mode: no roofline" in r.stdout


def test_profile_folder_with_no_usable_trace(tmp_path):
    (tmp_path / "a.json").write_text("{")
    (tmp_path / "b.json").write_text("[1, 2")
    _one_line_error(perflab("profile", "--trace", str(tmp_path)), "no usable trace among the 2 in")


def test_reference_record_prints_each_file_written(tmp_path):
    r = perflab("reference", "record", "--what", "heads", "--smoke", "--allow-cpu", "--device", "cpu",
                "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip().splitlines()[-1]
    assert line.startswith("heads: wrote ") and Path(line.removeprefix("heads: wrote ")).is_file()


def test_release_writes_a_folder_and_a_zip(tmp_path):
    r = perflab("release", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert Path(d["zip"]).stat().st_size == d["zip_bytes"] > 0
    assert d["labs"] and all(name.endswith(".ipynb") for name in d["labs"])
    assert not (Path(d["folder"]) / "labs" / "solutions").exists()
    text = perflab("release", str(tmp_path)).stdout
    assert f"{len(d['labs'])} labs, no solutions, outputs cleared" in text and "MiB)" in text


def test_grade_caps_jobs_reports_each_notebook_and_writes_csv(tmp_path):
    subs = tmp_path / "subs"
    (subs / "alice").mkdir(parents=True)
    (subs / "alice" / "01_flops.ipynb").write_text("not a notebook")
    csv = tmp_path / "book.csv"
    r = perflab("grade", str(subs), "--labs", "01", "--jobs", "999", "--csv", str(csv))
    assert r.returncode == 0, r.stderr
    assert "999 jobs asked" in r.stderr and "alice · 01_flops: error" in r.stderr
    assert f"Gradebook written to {csv}" in r.stdout
    rows = csv.read_text().splitlines()
    assert len(rows) == 2 and "alice" in rows[1] and "error" in rows[1]


# ---------------------------------------------------------------- mamf: default ranges, --fresh, failures, interruption

MAMF_CPU = ["--dtype", "fp32", "--device", "cpu", "--warmup-ms", "1", "--rep-ms", "2"]


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


def _landscape(p):
    v = p["m"] * p["n"] * p["k"] / 1e6
    return {"mean_tflops": v, "median_tflops": v, "max_tflops": v}


def _search_with(monkeypatch, measure):
    from perflab.gemm import mamf

    real = mamf.search
    monkeypatch.setattr(mamf, "search", lambda *a, **kw: real(*a, **{**kw, "measure": measure}))


RANGES = ["--m-range", "16", "64", "16", "--n-range", "16", "64", "16", "--k-range", "16", "64", "16"]


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


# ---------------------------------------------------------------- kernel: the text report

def _needs_triton():
    from perflab.gemm import triton_matmul as tm

    if not tm.available():
        pytest.skip(str(tm.unavailable_reason()))


KERNEL = ["kernel", "--tile", "32x32x16", "--warps", "2", "--dtype", "bf16"]  # the config test_triton_kernels caches


def test_kernel_text_report_with_waves_and_a_run():
    _needs_triton()
    r = perflab(*KERNEL, "--target", "sm_80", "--m", "37", "--n", "45", "--k", "53", "--run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("32x32x16 w2 s3 bf16 compiled for sm_80")
    assert lines[1].startswith("registers: ") and "per block" in lines[1]
    assert lines[2].startswith("tensor_core_instructions: ") and "(mma in the PTX)" in lines[2]
    assert lines[4].startswith("on NVIDIA A100") and "occupancy: " in lines[4]
    assert lines[5].startswith("37×45×53: tiles: 4    waves: 1 of ")
    assert lines[6].startswith("ran 37×45×53 on ") and lines[6].endswith(" ok")


def test_kernel_text_report_for_a_target_without_limits():
    _needs_triton()
    r = perflab(*KERNEL, "--target", "sm_86")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == ("no per-SM limits for sm_86 in perflab's table (it has them for sm_80, "
                                                 "A100, and sm_90, H100): occupancy and waves not computed")


def test_kernel_text_report_for_a_kernel_that_cannot_launch(monkeypatch):
    _needs_triton()
    from perflab.core.errors import InputError
    from perflab.gemm import compiled

    def too_big(registers, shared_bytes, num_warps, limits):  # what occupancy() says of a kernel over a limit
        raise InputError(f"shared memory per block {shared_bytes} is over {limits.name}'s limit: lower num_stages")

    monkeypatch.setattr(compiled, "occupancy", too_big)
    r = perflab(*KERNEL, "--target", "sm_80")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("cannot run: shared memory per block ")


def test_kernel_without_triton_is_one_line(monkeypatch):
    import sys

    from perflab.gemm import triton_matmul as tm

    monkeypatch.setitem(sys.modules, "triton", None)  # importlib finds no Triton
    tm.unavailable_reason.cache_clear()  # the answer is kept per process
    try:
        _one_line_error(perflab(*KERNEL), "Triton is not installed here")
    finally:
        tm.unavailable_reason.cache_clear()


# ---------------------------------------------------------------- busbw and collectives: a job that dies part-way

def _timed_out_job(target, nproc, backend):
    """What perflab.distributed.torchrun.launch returns when every rank is still in its second step at the timeout."""
    from perflab.distributed.torchrun import BackendChoice, LaunchResult, RankOutcome

    ranks = [RankOutcome(rank=r, status="timeout", step="all_reduce 262144 B", started=True, stdout="timing")
             for r in range(nproc)]
    return LaunchResult(target=target, nproc=nproc, nnodes=1, backend=BackendChoice(backend or "gloo", "cpu", "asked"),
                        commands=[["torchrun", "-m", target]], seconds=9.0, timeout_s=9.0, timed_out=True,
                        returncodes=[None], ranks=ranks)


def test_busbw_reports_sizes_a_stopped_job_did_not_reach(monkeypatch):
    from perflab.distributed import torchrun

    def launch(target, nproc, args, *, timeout, backend, **kw):
        out = Path(args[args.index("--out") + 1])  # rank 0 wrote the first size before the job was stopped
        out.write_text(json.dumps({"bytes": 4096, "seconds": 1e-4, "iters": 10, "correct": True, "algbw_gbps": 0.04096,
                                   "busbw_gbps": 0.04096, "backend": "gloo", "device": "cpu"}) + "\n")
        return _timed_out_job(target, nproc, backend)

    monkeypatch.setattr(torchrun, "launch", launch)
    r = perflab("busbw", "--nproc", "2", "--backend", "gloo", "--sizes", "4K", "256K")
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert lines[2].split()[:2] == ["4", "KiB"] and lines[2].endswith("✓")
    assert lines[3].split()[:2] == ["256", "KiB"] and "not measured: " in lines[3] and "did not finish within 9 s" in lines[3]
    assert lines[4].startswith("rank 0 (last step 'all_reduce 262144 B')") and "--- rank 1: timeout" in r.stdout


def test_collectives_reports_a_job_that_did_not_finish(monkeypatch):
    from perflab.distributed import torchrun

    monkeypatch.setattr(torchrun, "launch", lambda target, nproc, args, **kw: _timed_out_job(target, nproc, kw["backend"]))
    r = perflab("collectives", "--nproc", "2", "--backend", "gloo")
    assert r.returncode == 1
    assert "did not finish within 9 s" in r.stdout.splitlines()[0] and "--- rank 0: timeout" in r.stdout
    assert r.stderr.startswith("perflab collectives: not every check passed: ") and r.stderr.count("\n") == 1
    d = json.loads(perflab("collectives", "--nproc", "2", "--backend", "gloo", "--json").stdout)
    assert d["ok"] is False and d["primitives"] == []


def _ok_job(target, nproc, results):
    from perflab.distributed.torchrun import BackendChoice, LaunchResult, RankOutcome

    return LaunchResult(target=target, nproc=nproc, nnodes=1, backend=BackendChoice("gloo", "cpu", "asked"),
                        commands=[["torchrun", "-m", target]], seconds=1.0, timeout_s=60.0, timed_out=False,
                        returncodes=[0], ranks=[RankOutcome(rank=r, status="ok", started=True, result=res)
                                                for r, res in enumerate(results)])


def test_shard_json_leaves_out_the_pipeline_timelines(monkeypatch):
    from perflab.distributed import torchrun

    # GPipe on 2 stages, one micro-batch, F = 1 s and B = 2 s: stage 1 waits for stage 0's forward, stage 0
    # for stage 1's backward; each stage is busy 3 s of 6 (bubble (p−1)/(m+p−1) = 1/2)
    events = [[("F", 0.0, 1.0), ("B", 4.0, 6.0)], [("F", 1.0, 2.0), ("B", 2.0, 4.0)]]
    results = [{"rank": r, "schedule": "gpipe",
                "runs": [{"m": 1, "wall_s": 6.0, "busy_s": 3.0, "idle_s": 3.0, "bubble": 0.5, "max_in_flight": 1,
                          "activation_bytes_per_microbatch": 1024, "activation_bytes_held": 1024,
                          "events": events[r], "t0": 0.0}]} for r in range(2)]
    monkeypatch.setattr(torchrun, "launch", lambda target, nproc, args, **kw: _ok_job(target, nproc, results))
    r = perflab("shard", "--strategy", "pp", "--nproc", "2", "--microbatches", "1", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    (run,) = d["details"]["runs"]
    assert "events" not in run and run["formula"] == 0.5 and run["replayed_bubble"] == pytest.approx(0.5)
    assert [row["bubble"] for row in d["rows"]] == [0.5, 0.5] and d["ok"]


def test_swiglu_lists_the_widths_that_failed(monkeypatch, tmp_path):
    from perflab.gemm import swiglu

    real = swiglu.measure_width

    def sometimes(tokens, h, d_ff, *a, **kw):
        if d_ff == 172:
            raise RuntimeError("no kernel for this width")
        return real(tokens, h, d_ff, *a, **kw)

    monkeypatch.setattr(swiglu, "measure_width", sometimes)
    r = perflab("swiglu", "--hidden", "64", "--tokens", "32", "--widths", "168", "172", "--dtype", "fp32", "--device",
                "cpu", "--rep-ms", "2", "--warmup-ms", "1", env={"PERFLAB_RESULTS": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("1 width(s) failed: ") and "172" in last and "no kernel for this width" in last


def test_report_interrupted_keeps_what_it_wrote_and_exits_130(monkeypatch, tmp_path):
    from perflab.course import report as R

    def stop(ctx):
        raise KeyboardInterrupt  # the person presses Ctrl-C during the part

    monkeypatch.setitem(R.PARTS, "numa", ("NUMA topology", stop))
    r = perflab("report", "--only", "numa", "--out", str(tmp_path), env={"PERFLAB_RESULTS": str(tmp_path / "res")})
    assert r.returncode == 130, r.stderr
    assert "interrupted: what was measured is kept in" in r.stderr
    assert r.stdout.strip().splitlines()[-1] == f"wrote {tmp_path / 'report.json'} and {tmp_path / 'report.html'}"


def test_dataloader_reports_a_worker_that_hangs():
    r = perflab("dataloader", "--workers", "1", "--io-ms", "200", "--timeout", "0.05", "--batches", "2", "--batch", "1",
                "--compute-ms", "1", "--device", "cpu")
    assert r.returncode == 1, r.stderr
    row = r.stdout.splitlines()[2]
    assert row.split()[:2] == ["1", "failed:"] and "no batch within timeout=0.05 s" in row


def test_compile_reports_speed_breaks_recompiles_and_parity(monkeypatch):
    """The whole `perflab compile` report, with dynamo's "eager" backend in place of inductor: the same
    graph capture and the same eager-vs-compiled comparisons, without inductor's code generation
    (seconds instead of a minute on this machine)."""
    import torch

    from perflab.compiler import parity, speed

    real_measure, real_check = speed.measure, parity.check
    monkeypatch.setattr(speed, "measure", lambda fn, b, steps, *, mode: real_measure(fn, b, steps, mode=mode,
                                                                                     backend="eager"))
    monkeypatch.setattr(parity, "check", lambda model, b, steps, *, compile_kw: real_check(
        model, b, steps, compile_kw={**compile_kw, "backend": "eager"}))
    try:
        r = perflab("compile", "--preset", "tiny-gpt", "--steps", "2")
    finally:
        torch._dynamo.reset()
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0] == f"tiny-gpt on {'cuda' if torch.cuda.is_available() else 'cpu'}, mode default, checkpointing none"
    assert lines[1].startswith("step: eager ") and "break-even after" in lines[1]
    assert lines[2] == "graph breaks: 0; recompiles: 0"
    # the eager backend runs the captured graph with the same kernels: the losses agree to rounding
    assert lines[3].startswith("parity over 2 steps: max |Δloss| ") and lines[3].endswith("(tolerance 1e-04: ok)")
