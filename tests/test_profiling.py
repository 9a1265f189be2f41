"""Lesson 09: diagnosing a step from its trace, the planted faults, the CLI, ETTR, lab 09's checks."""

import json
import math
import subprocess
import sys
import textwrap

import pytest

from perflab.cli import main
from perflab.core import grading
from perflab.core.grading import LabCheckError
from perflab.profiling import ettr as E
from perflab.profiling import lab09
from perflab.profiling.diagnose import CAUSES, NONE_THRESHOLD, diagnose, tiny_runs
from perflab.profiling.faults import EXPECTED, profile_step
from perflab.profiling.trace import gaps, load, synthetic_step

# ----------------------------------------------------------------- diagnose on hand-built traces


@pytest.mark.parametrize("on_gpu", [False, True], ids=["cpu", "gpu"])
@pytest.mark.parametrize("cause", [None, *CAUSES])
def test_diagnose_names_the_cause_of_a_hand_built_trace(cause, on_gpu):
    d = diagnose(synthetic_step(cause, on_gpu=on_gpu))
    assert d.steps == 2 and math.isclose(d.step_s, 0.010)
    if cause is None:
        assert d.significant() == [] and d.device_busy > 0.85
    else:
        assert d.top.cause == cause and d.top.share > 0.25, d.summary()
        assert d.device_busy < 0.7
        assert d.top.evidence and d.top.evidence[0]["seconds"] > 0


def test_gpu_host_sync_gap_starts_where_the_sync_returns():
    # on a GPU the device idles *after* cudaStreamSynchronize returns: no overlap, still host_sync
    d = diagnose(synthetic_step("host_sync", on_gpu=True))
    names = {e["op"] for e in d.top.evidence}
    assert "cudaStreamSynchronize" in names or "aten::item" in names


def test_bad_traces_are_one_line_input_errors(tmp_path):
    from perflab.core.errors import InputError

    with pytest.raises(InputError, match="not found"):
        load(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(InputError, match="JSON"):
        load(tmp_path / "x.json")
    with pytest.raises(InputError, match="traceEvents"):
        load({"events": []})
    with pytest.raises(InputError, match="no complete"):
        load({"traceEvents": [{"ph": "M", "name": "x"}]})
    # what export_chrome_trace writes after a schedule's active window has passed: only the
    # profiler's own span (a plain script that steps 6 times through wait=1, warmup=1, active=3)
    empty_window = {"traceEvents": [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1},
                                    {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "ts": 0, "dur": 5,
                                     "pid": "Spans", "tid": "PyTorch Profiler"}]}
    with pytest.raises(InputError, match="on_trace_ready"):
        load(empty_window)


def test_gaps_and_tiny_runs():
    from perflab.profiling.trace import Interval

    ops = [Interval(0, 1, "a"), Interval(2, 3, "b"), Interval(2.5, 4, "c")]
    assert gaps(ops, 0, 5) == [(1, 2, 1), (4, 5, 3)]
    assert tiny_runs([Interval(0, 0.1, "t")] * 3 + [Interval(1, 2, "big")], 0.5) == [3, 3, 3, 0]


# ----------------------------------------------------------------- a trace nobody made with perflab

PLAIN_SCRIPT = textwrap.dedent("""
    import sys, time, torch
    from torch.profiler import profile, schedule, ProfilerActivity
    torch.set_num_threads(1)

    class Slow(torch.utils.data.Dataset):
        def __len__(self): return 64
        def __getitem__(self, i):
            time.sleep(0.02)             # slow storage
            return torch.randn(64), torch.randn(8)

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Slow(), batch_size=2)
    out = sys.argv[1]
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=2),
                 on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward(); opt.step(); opt.zero_grad()
            prof.step()
            if i == 3:
                break
    assert not any(m.startswith("perflab") for m in sys.modules)
""")


def test_profile_trace_diagnoses_a_plain_torch_profiler_script(tmp_path, capsys):
    script, trace = tmp_path / "plain.py", tmp_path / "plain_trace.json"
    script.write_text(PLAIN_SCRIPT)
    r = subprocess.run([sys.executable, str(script), str(trace)], capture_output=True, text=True, timeout=60,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert main(["profile", "--trace", str(trace), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"step_s", "device_busy", "causes", "trace_file", "steps", "step_source", "per_step"}
    assert out["trace_file"] == str(trace)
    assert out["causes"][0]["cause"] == "data_wait" and out["causes"][0]["share"] > 0.5
    assert set(out["causes"][0]) == {"cause", "seconds", "share", "evidence"}
    assert "DataLoader" in out["causes"][0]["evidence"][0]["op"]
    secs = [c["seconds"] for c in out["causes"]]
    assert secs == sorted(secs, reverse=True)


# ----------------------------------------------------------------- planted faults in perflab's step


@pytest.mark.parametrize("fault", ["none", "loader", "sync", "launch"])
def test_each_planted_fault_is_the_top_cause(fault, tmp_path, capsys):
    trace = tmp_path / f"{fault}.json"
    assert main(["profile", "--fault", fault, "--steps", "2", "--trace-out", str(trace), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trace_file"] == str(trace) and trace.is_file()
    causes = out["causes"]
    if fault == "none":  # nothing worth chasing: no cause above the stated threshold (10% of the step)
        assert all(c["share"] < NONE_THRESHOLD for c in causes), causes
    else:
        assert causes[0]["cause"] == EXPECTED[fault] and causes[0]["share"] >= NONE_THRESHOLD, causes


@pytest.mark.parametrize("fault", ["sync", "launch"])
def test_the_fix_removes_the_gap(fault, tmp_path):
    d = profile_step("tiny-gpt", fault, fixed=True, steps=2, trace_out=tmp_path / "fixed.json").diagnosis
    assert all(c.share < NONE_THRESHOLD for c in d.causes if c.cause == EXPECTED[fault]), d.summary()


def test_comm_fault_on_two_gloo_ranks(tmp_path):
    # two forked ranks joined through a FileStore (the CLI's default starts them with torchrun)
    run = profile_step("tiny-gpt", "comm", steps=2, trace_out=tmp_path / "comm.json", launcher="fork", timeout=60)
    d = run.diagnosis
    assert d.top.cause == "communication" and d.top.share >= NONE_THRESHOLD, d.summary()
    assert any("allreduce" in e["op"] for e in d.top.evidence)


# ----------------------------------------------------------------- CLI


def test_cli_errors_are_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "bad.json").write_text('{"a": 1}')
    for argv in (["profile", "--trace", str(tmp_path / "missing.json")], ["profile", "--trace", str(tmp_path / "bad.json")],
                 ["profile", "--fault", "gremlins"], ["profile", "--steps", "0"],
                 ["profile", "--trace-out", str(tmp_path / "no" / "dir" / "t.json")],
                 ["ettr", "--hours", "-1", "--gpus", "8", "--mtbf-hours", "1e4", "--ckpt-minutes", "1", "--restart-minutes", "1"],
                 ["ettr", "--hours", "10", "--gpus", "8", "--mtbf-hours", "1e4", "--ckpt-minutes", "x", "--restart-minutes", "1"]):
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
        err = capsys.readouterr().err
        assert rc == 2, argv
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_cli_ettr_json(capsys):
    assert main(["ettr", "--hours", "720", "--gpus", "1024", "--mtbf-hours", "50000", "--ckpt-minutes", "2",
                 "--restart-minutes", "10", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert 0 < out["ettr"] < 1 and out["interval_source"] == "the optimum"
    assert math.isclose(out["job_mtbf_hours"], 50000 / 1024)


# ----------------------------------------------------------------- ETTR and the optimal checkpoint interval


def test_what_llama3s_failure_rate_needs_to_reach_90_percent():
    # lesson 09's claim: at Llama 3's interruption rate only checkpoint stalls under a minute reach
    # 90%, and the longer the restart, the shorter the stall must be
    llama = E.llama3_failure_rate()
    rows = E.needed_for(0.90, llama["job_mtbf_hours"], [0.25, 0.5, 1, 2], [2, 5, 10, 20])
    assert not any(r["reaches"] for r in rows if r["ckpt_minutes"] >= 1)
    assert any(r["reaches"] for r in rows if r["ckpt_minutes"] < 1)
    for d in (0.25, 0.5):
        line = [r["ettr"] for r in rows if r["ckpt_minutes"] == d]
        assert line == sorted(line, reverse=True)
    reach_r = {d: max((r["restart_minutes"] for r in rows if r["ckpt_minutes"] == d and r["reaches"]), default=0)
               for d in (0.25, 0.5)}
    assert reach_r[0.25] >= reach_r[0.5] > 0


def test_ettr_uses_the_exact_model_and_recommends_its_peak(capsys):
    # delta 30 min, R 20 min, M 293 min: first order 0.543, Daly's exponential model 0.573
    assert main(["ettr", "--hours", "1000", "--gpus", "1", "--mtbf-hours", str(293 / 60), "--ckpt-minutes", "30",
                 "--restart-minutes", "20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert abs(out["ettr"] - 0.5726) < 5e-4 and abs(out["ettr_first_order"] - 0.5433) < 5e-4
    assert out["ettr"] == out["ettr_at_optimum"]
    tau = out["optimal_interval_min"]
    assert all(E.ettr_exact(tau * f, 30, 20, 293) < out["ettr"] for f in (0.9, 0.99, 1.01, 1.1))
    # the closed-form estimates are near the peak but not on it
    assert out["daly_interval_min"] != tau and out["young_interval_min"] != tau



def test_young_and_daly_intervals():
    # Young (1974), CACM 17(9): tau = sqrt(2 delta M). delta = 5 min, M = 24 h = 1440 min -> 120 min exactly
    assert math.isclose(E.young_interval(5, 1440), 120.0)
    # Daly (2006), FGCS 22(3), eq. 37: sqrt(2dM)(1 + sqrt(d/2M)/3 + (d/2M)/9) - d, and M once d >= 2M
    x = 5 / 2880
    assert math.isclose(E.daly_interval(5, 1440), 120 * (1 + math.sqrt(x) / 3 + x / 9) - 5)
    assert math.isclose(E.daly_interval(5, 1440), 116.69, abs_tol=0.01)
    assert E.daly_interval(100, 40) == 40
    # Young's interval maximises the first-order ETTR (the model it comes from) to within a few percent
    m = 1440.0
    best = max((E.ettr_fraction(t, 5, 0, m), t) for t in [i * 0.5 for i in range(20, 600)])[1]
    assert abs(best - E.young_interval(5, m)) / E.young_interval(5, m) < 0.05


def test_ettr_limits_and_published_figures():
    # no failures: only the checkpoint overhead tau / (tau + delta) is lost
    assert math.isclose(E.ettr_fraction(60, 1, 0, 1e12), 60 / 61, rel_tol=1e-6)
    assert E.ettr_fraction(60, 1, 1e6, 100) == 0.0
    pub = E.published()
    rows = {r["run"].split()[0]: r for r in pub["rows"]}
    # Llama 3 (arXiv:2407.21783, §3.3.4): >90% effective training time on 16k GPUs; Gemini (arXiv:2312.11805, §3): 97%
    assert rows["Llama"]["ettr_at_least"] == 0.90 and rows["Llama"]["gpus"] == 16384
    assert rows["Gemini"]["ettr_at_least"] == 0.97
    assert all(r["source"] for r in pub["rows"])
    f = E.llama3_failure_rate()  # 419 unexpected interruptions in 54 days
    assert math.isclose(f["job_mtbf_hours"], 54 * 24 / 419)


# ----------------------------------------------------------------- lab 09


def _solution(trace):
    ops, waits = trace.device_ops(), trace.waits()
    score = dict.fromkeys(("data_wait", "host_sync", "communication", "launch_bound"), 0.0)
    for step in trace.steps:
        for g0, g1, _ in gaps(ops, step.start, step.end):
            near = [w for w in waits if w.end >= g0 - 50e-6 and w.start <= g1]
            if near:
                w = max(near, key=lambda w: min(w.end, g1) - max(w.start, g0 - 50e-6))
                score[w.kind] += g1 - g0
    run, i = tiny_runs(ops, 20e-6), 0
    while i < len(ops):
        if run[i] >= 8:
            score["launch_bound"] += ops[i + run[i] - 1].end - ops[i].start
            i += run[i]
        else:
            i += 1
    cause, s = max(score.items(), key=lambda kv: kv[1])
    return cause if s / sum(st.dur for st in trace.steps) >= 0.10 else "none"


def test_lab09_checks():
    grading.reset()

    def stub(trace):
        raise NotImplementedError

    assert not lab09.check_name_cause(stub)
    assert lab09.check_name_cause(_solution)
    with pytest.raises(LabCheckError):
        lab09.check_name_cause(lambda t: "data_wait")
    with pytest.raises(LabCheckError, match="one of"):
        lab09.check_name_cause(lambda t: "gremlins")
    right = lab09.right_fix()
    assert not lab09.check_fixes({c: "?" for c in right})
    assert lab09.check_fixes(dict(right))
    with pytest.raises(LabCheckError):
        lab09.check_fixes({**right, "data_wait": next(k for k in "abcde" if k not in right.values())})


# ----------------------------------------------------------------- HolisticTraceAnalysis on hand-built GPU-style traces


@pytest.mark.parametrize("cause", ["host_sync", "launch_bound", "communication", "data_wait"])
def test_hta_cross_check_on_hand_built_gpu_traces(cause, tmp_path):
    pytest.importorskip("hta", reason="HolisticTraceAnalysis is not installed")
    from perflab.profiling import hta

    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(synthetic_step(cause, on_gpu=True)))
    r = hta.cross_check(path)
    if cause == "data_wait":
        # the idle before each step's first kernel is outside HTA's per-iteration kernel span
        assert r["hta_idle"] < r["perflab_idle"] - 0.3
    else:  # idle inside the kernels' span: the two agree up to the step edges perflab counts
        assert abs(r["difference"]) < 0.1, r


# ----------------------------------------------------------------- ops, timing, Nsight, the custom kernel


def _trace_with(events):
    return {"traceEvents": [{"ph": "X", "pid": 1, "tid": 1, "args": {}, **e} for e in events]}


def test_gemm_efficiency_from_shapes():
    from perflab.profiling import ops

    t = _trace_with([
        {"name": "ProfilerStep#1", "cat": "user_annotation", "ts": 0, "dur": 1000},
        {"name": "aten::mm", "cat": "cpu_op", "ts": 10, "dur": 100, "args": {"Input Dims": [[64, 32], [32, 16]]}},
        {"name": "aten::addmm", "cat": "cpu_op", "ts": 200, "dur": 100,
         "args": {"Input Dims": [[16], [64, 32], [32, 16]]}},
        {"name": "aten::bmm", "cat": "cpu_op", "ts": 400, "dur": 200, "args": {"Input Dims": [[4, 8, 16], [4, 16, 2]]}},
        {"name": "aten::relu", "cat": "cpu_op", "ts": 700, "dur": 100},
    ])
    flops = 2 * 64 * 32 * 16 * 2 + 2 * 4 * 8 * 16 * 2
    eff = ops.gemm_efficiency(t, ceiling_tflops=1e-3)  # 1 GFLOP/s
    assert math.isclose(eff["gemm_s"], 400e-6) and math.isclose(eff["step_s"], 1e-3)
    assert math.isclose(eff["achieved_tflops"], flops / 400e-6 / 1e12)
    assert math.isclose(eff["ideal_gemm_s"], flops / 1e9)
    assert math.isclose(eff["outside_gemms_s"], 600e-6)
    assert ops.tensor_core_share(t) is None  # a CPU trace has no kernels


def test_tensor_core_share_is_a_name_heuristic():
    from perflab.profiling import ops

    t = _trace_with([
        {"name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "cat": "kernel",
         "ts": 0, "dur": 300},
        {"name": "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", "cat": "kernel",
         "ts": 300, "dur": 100},
        {"name": "aten::mm", "cat": "cpu_op", "ts": 0, "dur": 10},
    ])
    assert math.isclose(ops.tensor_core_share(t)["share"], 0.75)


def test_timing_pitfalls_on_this_device():
    from perflab.profiling import pitfalls

    rows = pitfalls.pitfalls(n=64, reps=3, device="cpu")
    assert [r["method"] for r in rows][0] == "wall clock, no sync" and len(rows) == 4
    assert rows[2]["seconds"] is None  # no CUDA events on a CPU
    assert all(r["seconds"] > 0 for r in rows if r["seconds"] is not None)


def test_nsight_commands_are_generated_and_never_required():
    from perflab.core.errors import UnsupportedError
    from perflab.profiling import nsight

    c = nsight.commands("tiny-gpt", fault="sync", steps=3, out="x")
    assert c["nsys"].startswith("nsys profile") and "-m perflab profile --preset tiny-gpt --fault sync" in c["nsys"]
    assert c["ncu"].startswith("ncu ")
    if not nsight.available()["nsys"]:
        with pytest.raises(UnsupportedError, match="not installed"):
            nsight.run(c["nsys"])


def test_custom_kernel_skips_cleanly_or_matches_eager(monkeypatch):
    from perflab.profiling import kernel

    monkeypatch.setattr(kernel, "is_built", lambda: False)
    k = kernel.build(allow_compile=False)
    assert k.module is None and k.skip  # never compiles when told not to
    monkeypatch.undo()
    if kernel.compiler_missing() or not kernel.is_built():
        pytest.skip("the fused kernel is not in torch's extension cache; building it takes tens of seconds "
                    "on a small CPU (lesson 09 with smoke=False builds it once)")
    k = kernel.build(allow_compile=False)
    assert k.skip is None
    r = kernel.compare(k, rows=256, cols=128)
    assert r["max_abs_diff"] < 1e-5 and r["in_trace"]


# ----------------------------------------------------------------- GPU (skipped here; written to run on CUDA)


@pytest.mark.gpu
@pytest.mark.parametrize("fault", ["none", "loader", "sync", "launch"])
def test_gpu_trace_faults_and_hta(fault, tmp_path):
    run = profile_step("tiny-gpt", fault, steps=3, trace_out=tmp_path / f"{fault}.json")
    d = run.diagnosis
    assert load(run.trace_path).on_gpu and "GPU" in d.device
    if fault == "none":
        assert d.significant(NONE_THRESHOLD) == [], d.summary()
    else:
        assert d.top.cause == EXPECTED[fault], d.summary()
    from perflab.profiling import ops

    assert ops.tensor_core_share(run.trace_path) is not None
    pytest.importorskip("hta", reason="HolisticTraceAnalysis is not installed")
    from perflab.profiling import hta

    r = hta.cross_check(run.trace_path)
    assert 0 <= r["hta_idle"] <= 1 and 0 <= r["perflab_idle"] <= 1
