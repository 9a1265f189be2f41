"""Tests of `perflab.tune.runner`."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest
import torch
from clirun import perflab

from perflab.core.errors import InputError, PerflabError
from perflab.flops import mfu
from perflab.tune import ladder, runner

from .helpers import CPU, SMOKE


# ----------------------------------------------------------------------------- the report
def _cpu_ctx(quick: bool):
    import torch

    from perflab.core.device import DeviceInfo
    from perflab.course import report as R

    return R.Ctx(torch.device("cpu"), DeviceInfo("cpu", "test cpu"), quick)


def _measurement(peak: int) -> runner.Measurement:
    return runner.Measurement(step_s=0.01, step_times_s=[0.01], data_wait_s=0.0, forward_s=0.004, backward_s=0.004,
                              optimizer_s=0.002, compile_s=None, tokens_per_step=256, losses=[6.2], peak_bytes=peak,
                              peak_how="tracemalloc", model_flops=10**9, hardware_flops=10**9)


def _interrupted(seen):
    def measure_config(tp, sc, **kw):
        seen.append(tp)
        raise KeyboardInterrupt  # the learner presses stop during the first rung
    return measure_config


QUICK = "baseline,adamw,vocab64,numa"  # seconds on the smoke preset: no compile


@pytest.fixture(scope="module")
def quick_ladder(tmp_path_factory):
    path = tmp_path_factory.mktemp("tune") / "tune_smoke.jsonl"
    return path, runner.run_ladder("smoke", QUICK, steps=1, device=CPU, path=path, profile=True)


def test_the_full_tune_part_runs_the_devices_preset_and_says_where_it_stopped(monkeypatch):
    from perflab.course import report as R
    from perflab.tune import runner

    calls = []

    def ladder(*args, **kw):
        calls.append((args, kw))
        rows = [{"rung": "baseline", "step_s": 1.0, "tokens_per_s": 100.0, "speedup_vs_baseline": 1.0,
                 "adopted": True, "parity_ok": True}]
        return runner.LadderResult("cpu", "cpu", rows, "sdpa: loss off by 0.3 (tolerance 0.01)", "")

    monkeypatch.setattr(runner, "run_ladder", ladder)
    ctx = _cpu_ctx(quick=False)
    out = R.part_tune(ctx)
    assert calls == [(("cpu",), {"device": ctx.device})]
    assert out["notes"] == ["stopped: sdpa: loss off by 0.3 (tolerance 0.01)"]
    assert out["summary"] == "cpu preset: stopped (sdpa: loss off by 0.3 (tolerance 0.01))"


def test_written_out_attention_with_fewer_kv_heads_matches_sdpa():
    cfg = replace(SMOKE.cfg, heads=4, kv_heads=2)  # grouped-query attention: each K/V head serves two query heads
    x = torch.randint(0, cfg.vocab, (2, 16))
    written = runner.build(cfg, runner.StepConfig(sdpa=False), CPU)
    fused = runner.build(cfg, runner.StepConfig(sdpa=True), CPU)
    assert isinstance(written.blocks[0].attn, runner.WrittenOutAttention)  # pyright: ignore[reportIndexIssue, reportAttributeAccessIssue]  # nn.Module attribute
    with torch.no_grad():
        torch.testing.assert_close(written(x), fused(x), rtol=1e-4, atol=1e-5)


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


def test_a_faster_batch_rung_over_the_budget_is_not_adopted():
    ch = runner.Change(runner.StepConfig(micro_batch=8), True, "micro-batch 2 → 8")
    base = {"rung": "baseline", "step_s": 0.02, "loss": 6.2, "parity_ok": True}
    r = mfu.Basis(0.1, "measured ceiling", "fp32", "fastest of 5", "2026-01-01", (1, 2, 3), 1)
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


def test_a_compiled_rung_reports_its_compile_time(monkeypatch):
    real = torch.compile
    # dynamo alone (backend "eager"): the first step still pays the tracing, without inductor's code generation
    monkeypatch.setattr(torch, "compile", lambda model, **kw: real(model, backend="eager"))
    torch._dynamo.reset()
    traced = []
    try:
        m = runner.measure_config(SMOKE, runner.StepConfig(micro_batch=8, compiled=True), steps=1, warmup=1,
                                  device=CPU, profile=False)
        traced.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    finally:
        torch._dynamo.reset()
    # the first step's extra time over the median step (how much more it is depends on the machine's
    # load, so only what load cannot change is asserted: it is reported, and dynamo did trace graphs)
    assert m.compile_s is not None and m.compile_s >= 0.0
    assert traced and traced[0] > 0


def test_padding_keeps_the_function_and_written_out_attention_matches_sdpa():
    cfg = ladder.SMOKE_CFG
    a = runner.build(cfg, runner.StepConfig(), CPU)
    b = runner.build(cfg, runner.StepConfig(sdpa=True, pad_vocab=True), CPU)
    assert type(a.blocks[0].attn) is runner.WrittenOutAttention and b.embed.weight.shape[0] == 512  # pyright: ignore[reportIndexIssue, reportAttributeAccessIssue]  # nn.ModuleList indexing
    x = torch.randint(0, cfg.vocab, (2, cfg.seq_len))
    with torch.no_grad():
        la, lb = a(x), b(x)
    assert lb.shape[-1] == 512 and torch.allclose(la, lb[..., :cfg.vocab], atol=1e-5)
    assert torch.equal(lb[..., cfg.vocab:], torch.zeros_like(lb[..., cfg.vocab:]))  # zero rows: zero logits


def test_batch_and_checkpoint_rungs_follow_the_memory_estimator():
    tp = ladder.preset("smoke")  # budget 3 MiB: micro-batch 4 fits, 8 needs checkpointing
    sc = runner.StepConfig(micro_batch=2)
    ch = runner.apply_rung("batch", sc, tp, CPU, [])
    assert ch.applicable and ch.config.micro_batch == 4 and ch.extra["predicted_peak_bytes"] <= tp.memory_budget_bytes
    ck = runner.apply_rung("checkpoint", ch.config, tp, CPU, [])
    assert ck.applicable and ck.config.checkpointing and ck.config.micro_batch == 8
    early = runner.apply_rung("checkpoint", sc, tp, CPU, [])  # the batch rung has not raised it yet
    assert not early.applicable and "does not need it" in early.note
    roomy = ladder.TunePreset("roomy", tp.cfg, 8, 2, 2, 1, 0.0, 2**30, 1.1)
    full = runner.apply_rung("batch", sc, roomy, CPU, [])
    assert full.config.micro_batch == 8
    assert not runner.apply_rung("checkpoint", full.config, roomy, CPU, []).applicable


def test_a_ladder_measures_every_rung_with_every_field(quick_ladder):
    _, res = quick_ladder
    assert [r["rung"] for r in res.rows] == QUICK.split(",") and res.stopped is None
    for r in res.rows:
        for k in runner.FIELDS:
            assert r.get(k) is not None, (r["rung"], k)
        assert r["parity_ok"] and abs(r["loss_delta"]) <= r["tolerance"] * r["loss"]
        assert r["mfu_basis"] in ("spec peak", "measured ceiling") and r["mfu_basis_label"]
        assert 0 < r["mfu"] and r["hfu"] >= r["mfu"] and r["peak_bytes"] > 0
        assert r["verdict"] in ("reference", "adopted", "kept out", "inconclusive", "n/a")
    base = res.rows[0]
    assert base["speedup_vs_baseline"] == 1.0 and base["loss_delta"] == 0.0
    assert sum(base["breakdown"].values()) == pytest.approx(base["step_s"])
    pad = res.rows[2]
    assert pad["hardware_flops_per_step"] > pad["model_flops_per_step"]  # the padded columns are hardware work
    assert res.rows[3]["measured"] in (True, False) and res.fastest["parity_ok"]


def test_a_ladder_resumes_from_saved_rungs(quick_ladder):
    path, first = quick_ladder
    again = runner.run_ladder("smoke", QUICK, steps=1, device=CPU, path=path)
    assert again.measured == 0 and again.resumed == len(first.rows)
    assert [r["step_s"] for r in again.rows] == [r["step_s"] for r in first.rows]


def test_a_rung_that_changes_the_model_stops_the_ladder(tmp_path, monkeypatch):
    real = runner.build

    def drifting(cfg, sc, device):  # the "fused optimizer" rung secretly changes the initial weights
        m = real(cfg, sc, device)
        if sc.optimizer != "loop":
            with torch.no_grad():
                m.embed.weight.mul_(3.0)  # pyright: ignore[reportCallIssue, reportAttributeAccessIssue]  # nn.Module attribute
        return m

    monkeypatch.setattr(runner, "build", drifting)
    res = runner.run_ladder("smoke", "baseline,adamw,sdpa", steps=1, device=CPU, path=tmp_path / "t.jsonl", profile=False)
    assert [r["rung"] for r in res.rows] == ["baseline", "adamw"]
    assert res.stopped is not None and "rung 'adamw' broke parity" in res.stopped and "tolerance" in res.stopped


def test_cli_prints_one_row_per_rung_and_bad_input_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    r = perflab("tune", "--preset", "smoke", "--rungs", "baseline,numa", "--steps", "1", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["rung"] for x in doc["rows"]] == ["baseline", "numa"]
    assert all(set(runner.FIELDS) <= set(x) for x in doc["rows"])
    text = perflab("tune", "--preset", "smoke", "--rungs", "baseline,numa", "--steps", "1")
    assert text.returncode == 0 and "speedup_vs_baseline" in text.stdout and "resumed" not in text.stdout
    for args, msg in ((["--preset", "tpu"], "unknown preset 'tpu'"), (["--rungs", "flash"], "unknown rung 'flash'"),
                      (["--preset", "smoke", "--batch", "3"], "not a multiple"), (["--steps", "0"], "must be ≥ 1")):
        bad = perflab("tune", *args)
        assert bad.returncode == 2 and msg in bad.stderr and bad.stderr.count("\n") == 1, (args, bad.stderr)


def test_the_ladder_and_the_audit_measure_a_cpu_ceiling_at_the_same_shape():
    from perflab.tune.ladder import preset

    assert runner.step_shape(preset("cpu")) == mfu.CEILING_SHAPE_CPU == mfu.ceiling_shape(CPU)


def test_a_rung_faster_than_its_ceiling_shows_no_mfu_and_says_the_ceiling_is_suspect():
    low = mfu.Basis(1e-6, "measured ceiling", "fp32", "fastest of 5", "2026-01-01", (1, 2, 3), 1)
    f = runner.mfu_fields(_measurement(1024), low)
    assert f["mfu"] is None and f["hfu"] is None and "ceiling is suspect" in f["mfu_suspect"]
    ok = runner.mfu_fields(_measurement(1024), mfu.Basis(1e6, "spec peak", "fp32", "datasheet"))
    assert 0 < ok["mfu"] < 1 and ok["mfu_suspect"] is None and ok["mfu_basis_info"]["tflops"] == 1e6


@pytest.mark.usefixtures("watch_all_cores")
def test_a_rung_timed_on_a_busy_machine_is_inconclusive_and_says_so(tmp_path):
    """Made-up load (counters injected): every block is disturbed, so no verdict whatever the steps
    measured; the row carries the quietness of the blocks and the reason."""
    from perflab.core.quietness import MadeUpLoad, injected

    base = runner.StepConfig(micro_batch=SMOKE.micro_batch)
    cand = runner.apply_rung("adamw", base, SMOKE, CPU, []).config
    with injected(MadeUpLoad(0.6)):
        pm = runner.measure_pair(SMOKE, base, cand, min_pairs=1, warmup=1, device=CPU, budget_s=0.3, profile=False)
    assert pm.verdict == "inconclusive" and pm.decision.busy and pm.decision.kept == 0
    assert pm.decision.text().startswith("inconclusive: the machine was busy (other programs used 60 % of")
    assert pm.candidate.quietness.disturbed and pm.waited_s >= 0.0
    prev_row = {"rung": "baseline", "step_s": pm.candidate.step_s, "speedup_vs_baseline": 1.0, "loss": pm.candidate.loss,
                "breakdown": {}}
    r = mfu.Basis(0.1, "measured ceiling", "fp32", "fastest of 5", "2026-01-01", (1, 2, 3), 1)
    row = runner._row_from("adamw", runner.apply_rung("adamw", base, SMOKE, CPU, []), pm.candidate, prev_row,
                           None, r, SMOKE, CPU, pm)
    assert row["verdict"] == "inconclusive" and row["busy"] and row["quietness"]["verdict"] == "disturbed"
    assert all(not b["kept"] and b["quietness"]["verdict"] == "disturbed" for b in row["blocks"])
    assert row["explain"].startswith("inconclusive: the machine was busy (other programs used 60 % of")


def test_every_measured_row_carries_the_quietness_of_its_steps(quick_ladder):
    _, res = quick_ladder
    for r in res.rows:
        if r.get("measured"):
            assert r["quietness"]["verdict"] in ("quiet", "disturbed", "unknown")
            if r["verdict"] not in ("reference", "n/a"):
                assert r["blocks"] and all("quietness" in b for b in r["blocks"])
