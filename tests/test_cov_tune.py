"""The tuning ladder's less common paths: grouped-query attention written out, the optimizer and
bf16 choices, a rung that does not apply, a ladder that stops, fails or is interrupted, binding to a
NUMA node. The smoke preset at one step, on the CPU."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch
from clirun import perflab

from perflab.core.errors import InputError, PerflabError
from perflab.tune import runner, waterfall
from perflab.tune.ladder import preset as tune_preset

CPU = torch.device("cpu")
SMOKE = tune_preset("smoke")


def test_written_out_attention_with_fewer_kv_heads_matches_sdpa():
    cfg = replace(SMOKE.cfg, heads=4, kv_heads=2)  # grouped-query attention: each K/V head serves two query heads
    x = torch.randint(0, cfg.vocab, (2, 16))
    written = runner.build(cfg, runner.StepConfig(sdpa=False), CPU)
    fused = runner.build(cfg, runner.StepConfig(sdpa=True), CPU)
    assert isinstance(written.blocks[0].attn, runner.WrittenOutAttention)  # pyright: ignore[reportIndexIssue, reportAttributeAccessIssue]  # nn.Module attribute
    with torch.no_grad():
        torch.testing.assert_close(written(x), fused(x), rtol=1e-4, atol=1e-5)


def test_the_ladder_refuses_a_model_that_is_not_gpt_shaped():
    with pytest.raises(InputError, match="GPT-shaped models"):
        runner.build(replace(SMOKE.cfg, positions="rotary"), runner.StepConfig(), CPU)


def test_optimizer_kinds():
    p = [torch.nn.Parameter(torch.zeros(2))]
    assert runner.make_optimizer(p, "foreach", CPU).defaults["foreach"] is True
    assert runner.make_optimizer(p, "loop", CPU).defaults["foreach"] is False
    with pytest.raises(InputError, match="unknown optimizer kind 'sgd'"):
        runner.make_optimizer(p, "sgd", CPU)
    # a device with no fused AdamW kernel (the meta device computes nothing): the ladder falls back to foreach
    assert runner.fused_adamw_available(torch.device("meta")) is False
    assert runner.apply_rung("adamw", runner.StepConfig(), SMOKE, torch.device("meta"), []).config.optimizer == "foreach"


def test_apply_rung_when_a_rung_does_not_apply():
    sc = runner.StepConfig(micro_batch=2)
    even = replace(SMOKE, cfg=replace(SMOKE.cfg, vocab=512))
    ch = runner.apply_rung("vocab64", sc, even, CPU, [])
    assert not ch.applicable and ch.note == "the vocabulary (512) is already a multiple of 64"
    ch = runner.apply_rung("compile", sc, SMOKE, CPU, [])
    assert ch.applicable and ch.config.compiled and not sc.compiled
    tight = replace(SMOKE, memory_budget_bytes=1)  # nothing fits one byte
    assert runner.largest_fitting(tight, sc, CPU, False)[0] == 2
    ch = runner.apply_rung("batch", sc, tight, CPU, [])
    assert not ch.applicable and ch.note.startswith("no larger micro-batch fits the budget of")
    ch = runner.apply_rung("checkpoint", sc, tight, CPU, [])
    assert not ch.applicable and ch.note.startswith("even with checkpointing no larger micro-batch fits")
    with pytest.raises(InputError, match="unknown rung 'flash'"):
        runner.apply_rung("flash", sc, SMOKE, CPU, [])


def test_a_preset_without_a_budget_needs_a_gpu():
    with pytest.raises(InputError, match="no memory budget for a cpu device"):
        runner.memory_budget(replace(SMOKE, memory_budget_bytes=None), CPU)


def test_bound_to_sets_and_restores_the_affinity():
    before = os.sched_getaffinity(0)
    one = sorted(before)[:1]
    with runner.bound_to(one):
        assert os.sched_getaffinity(0) == set(one)
    assert os.sched_getaffinity(0) == before


def test_measure_config_on_numa_node_0_reports_progress(monkeypatch):
    from perflab.numa import topology

    seen = []
    sc = runner.StepConfig(micro_batch=4, numa_node=0)  # node 0 exists on every Linux machine
    cpus = next(n.cpus for n in topology.read_topology().nodes if n.id == 0)
    real_bound = runner.bound_to
    monkeypatch.setattr(runner, "bound_to", lambda c: (seen.append(("cpus", c)), real_bound(c))[1])
    m = runner.measure_config(SMOKE, sc, steps=1, warmup=1, device=CPU, profile=False, progress=seen.append)
    assert ("cpus", cpus) in seen and [x for x in seen if isinstance(x, str)] == ["step 1/2", "step 2/2"]
    assert m.step_s > 0 and len(m.losses) == 2 and m.compile_s is None
    with pytest.raises(InputError, match="micro-batch 3 does not divide the global batch 8"):
        runner.measure_config(SMOKE, replace(sc, micro_batch=3), steps=1, warmup=0, device=CPU, profile=False)


def _measurement(peak: int) -> runner.Measurement:
    return runner.Measurement(step_s=0.01, step_times_s=[0.01], data_wait_s=0.0, forward_s=0.004, backward_s=0.004,
                              optimizer_s=0.002, compile_s=None, tokens_per_step=256, losses=[6.2], peak_bytes=peak,
                              peak_how="tracemalloc", model_flops=10**9, hardware_flops=10**9)


def test_a_faster_batch_rung_over_the_budget_is_not_adopted():
    ch = runner.Change(runner.StepConfig(micro_batch=8), True, "micro-batch 2 → 8")
    base = {"rung": "baseline", "step_s": 0.02, "loss": 6.2, "parity_ok": True}
    r = runner.rates(CPU, "fp32")
    budget = SMOKE.memory_budget_bytes
    assert budget is not None
    over = runner._row_from("batch", ch, _measurement(budget + 1), base, base, r, SMOKE, CPU)
    assert over["parity_ok"] and over["speedup_vs_previous"] == pytest.approx(2.0)
    assert over["fits_budget"] is False and over["adopted"] is False
    inside = runner._row_from("batch", ch, _measurement(1024), base, base, r, SMOKE, CPU)
    assert inside["fits_budget"] is True and inside["adopted"] is True


def test_ladder_table_has_one_row_per_rung():
    rows = [{"rung": "baseline", "step_s": 0.02, "tokens_per_s": 1e4, "mfu": 0.1, "hfu": 0.12, "peak_bytes": 10,
             "loss_delta": 0.0, "speedup_vs_baseline": 1.0, "adopted": False, "note": "the reference"}]
    df = runner.LadderResult("smoke", "cpu", rows, None, "t.jsonl", 1, 0).table()
    assert list(df.columns) == [*runner.FIELDS, "adopted", "note"] and df.loc[0, "rung"] == "baseline"


# ---------------------------------------------------------------- run_ladder: batch, --fresh, interrupted, failed

def _interrupted(seen):
    def measure_config(tp, sc, **kw):
        seen.append(tp)
        raise KeyboardInterrupt  # the learner presses stop during the first rung
    return measure_config


def test_an_interrupted_ladder_says_how_to_resume_and_fresh_sets_old_results_aside(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(runner, "measure_config", _interrupted(seen))
    path = tmp_path / "tune_smoke.jsonl"
    path.write_text("")  # an earlier ladder's results
    res = runner.run_ladder("smoke", "baseline,adamw", steps=1, batch=16, device=CPU, path=path, fresh=True,
                            progress=False)
    assert res.stopped == "interrupted: run the same command again to resume" and res.rows == []
    assert seen[0].global_batch == 16
    assert len(list(tmp_path.glob("tune_smoke.*.jsonl"))) == 1


def test_cli_prints_stopped_when_interrupted(monkeypatch, tmp_path):
    from perflab.tune import runner as R

    rows = [{"rung": "baseline", "lesson": "—", "step_s": 0.02, "tokens_per_s": 1e4, "mfu": 0.1, "hfu": 0.12,
             "peak_bytes": 2**20, "loss_delta": 0.0, "speedup_vs_baseline": 1.0, "adopted": False, "note": "the reference",
             "losses": [6.2], "parity_ok": True, "mfu_basis": "spec peak"}]
    stopped = R.LadderResult("smoke", "cpu", rows, "interrupted: run the same command again to resume", "t.jsonl", 1, 0)
    monkeypatch.setattr(R, "run_ladder", lambda *a, **kw: stopped)
    r = perflab("tune", "--preset", "smoke", "--rungs", "baseline,adamw", "--steps", "1")
    assert r.returncode == 0, r.stderr  # interrupted is not a failure: run again to resume
    assert r.stdout.rstrip().endswith("STOPPED: interrupted: run the same command again to resume")


def test_a_rung_that_fails_is_one_line(monkeypatch, tmp_path):
    def boom(tp, sc, **kw):
        raise RuntimeError("the kernel for this shape is missing")

    monkeypatch.setattr(runner, "measure_config", boom)
    with pytest.raises(PerflabError, match="rung 'baseline' failed: RuntimeError: the kernel for this shape is missing"):
        runner.run_ladder("smoke", "baseline", steps=1, device=CPU, path=tmp_path / "t.jsonl", progress=False)


# ---------------------------------------------------------------- waterfall, published figures, lab 11

def test_moved_is_the_change_per_category_from_the_baseline():
    base = {"breakdown": {"compute": 0.010, "data_wait": 0.004, "optimizer": 0.002}}
    row = {"breakdown": {"compute": 0.009, "data_wait": 0.0, "optimizer": 0.002}}
    d = waterfall.moved(base, row)
    assert set(d) == set(waterfall.CATEGORIES)
    assert d["compute"] == pytest.approx(-0.001) and d["data_wait"] == pytest.approx(-0.004) and d["optimizer"] == 0.0
    assert waterfall.moved({}, row)["compute"] == pytest.approx(0.009)


def test_an_unknown_published_figure_is_a_key_error():
    from perflab.tune import published

    with pytest.raises(KeyError):
        published.figure("no-such-figure")
    first = published.rows()[0]
    assert published.figure(first["id"]) == first


def test_lab11_says_when_the_plan_is_only_partly_measured():
    from perflab.core.grading import LabCheckError
    from perflab.tune import lab11

    row = {"rung": "baseline", "measured": True, "parity_ok": True, "step_s": 0.02, "speedup_vs_baseline": 1.0,
           "peak_bytes": 2**20, "adopted": False}
    part = runner.LadderResult("smoke", "cpu", [row], None, "t.jsonl", 1, 0)
    with pytest.raises(LabCheckError, match=r"only 1 of 2 rungs were measured: run the plan again"):
        lab11.check_result(["baseline", "adamw"], part, target=1.1, budget=None)


def test_nested_optimizer_spans_never_make_the_parts_exceed_the_step():
    from perflab.profiling.trace import synthetic_step

    raw = synthetic_step("data_wait", steps=2)
    # an optimizer that wraps another (ZeroRedundancyOptimizer around AdamW): two nested
    # Optimizer.step# spans per step, most of the step long, so the spans add up to more than the step
    for s in range(2):
        for name, ts, dur in (("Optimizer.step#ZeroRedundancyOptimizer.step", 1_000.0, 8_500.0),
                              ("Optimizer.step#AdamW.step", 1_100.0, 8_300.0)):
            raw["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1,
                                       "ts": s * 10_000.0 + ts, "dur": dur})
    bd = waterfall.breakdown_of_trace(raw, step_s=0.010)
    assert sum(bd.values()) == pytest.approx(0.010) and all(v >= 0 for v in bd.values())
    assert bd["compute"] == pytest.approx(0.0, abs=1e-12) and bd["optimizer"] > 0.008


def test_a_compiled_rung_reports_its_compile_time(monkeypatch):
    real = torch.compile
    # dynamo alone (backend "eager"): the first step still pays the tracing, without inductor's code generation
    monkeypatch.setattr(torch, "compile", lambda model, **kw: real(model, backend="eager"))
    torch._dynamo.reset()
    try:
        m = runner.measure_config(SMOKE, runner.StepConfig(micro_batch=8, compiled=True), steps=1, warmup=1,
                                  device=CPU, profile=False)
    finally:
        torch._dynamo.reset()
    # the first step's extra time: tracing the model and its backward costs far more than one step of it
    assert m.compile_s is not None and m.compile_s > m.step_s
