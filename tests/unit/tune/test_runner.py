"""Tests of `perflab.tune.runner`: the ladder run, saved, resumed and stopped."""

from __future__ import annotations

import json

import pytest
import torch
from clirun import perflab

from perflab.core.errors import PerflabError
from perflab.tune import measure, runner
from perflab.tune.ladder import preset as tune_preset

from .helpers import CPU


# ----------------------------------------------------------------------------- the report
# ----------------------------------------------------------------------------- the report
def _cpu_ctx(quick: bool):
    import torch

    from perflab.core.device import DeviceInfo
    from perflab.course import report as R

    return R.Ctx(torch.device("cpu"), DeviceInfo("cpu", "test cpu"), quick)


def _interrupted(seen):
    def measure_config(tp, sc, **kw):
        seen.append(tp)
        raise KeyboardInterrupt  # the learner presses stop during the first rung
    return measure_config


QUICK = "baseline,adamw,vocab64,numa"  # seconds on the smoke preset: no compile
QUICK_BUDGET_S = 0.5  # each rung's timing, at most: these tests read the rows' fields, not a verdict's confidence


@pytest.fixture(scope="module")
def quick_ladder(tmp_path_factory):
    path = tmp_path_factory.mktemp("tune") / "tune_smoke.jsonl"
    return path, runner.run_ladder("smoke", QUICK, steps=1, device=CPU, path=path, profile=True, budget_s=QUICK_BUDGET_S)


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
    assert out.notes == ["stopped: sdpa: loss off by 0.3 (tolerance 0.01)"]
    assert out.summary == "cpu preset: stopped (sdpa: loss off by 0.3 (tolerance 0.01))"


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
    again = runner.run_ladder("smoke", QUICK, steps=1, device=CPU, path=path, budget_s=QUICK_BUDGET_S)
    assert again.measured == 0 and again.resumed == len(first.rows)
    assert [r["step_s"] for r in again.rows] == [r["step_s"] for r in first.rows]


def test_a_rung_that_changes_the_model_stops_the_ladder(tmp_path, monkeypatch):
    real = measure.build

    def drifting(cfg, sc, device):  # the "fused optimizer" rung secretly changes the initial weights
        m = real(cfg, sc, device)
        if sc.optimizer != "loop":
            with torch.no_grad():
                m.embed.weight.mul_(3.0)  # pyright: ignore[reportCallIssue, reportAttributeAccessIssue]  # nn.Module attribute
        return m

    monkeypatch.setattr(measure, "build", drifting)  # where an arm of the ladder builds its model
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


def test_every_measured_row_carries_the_quietness_of_its_steps(quick_ladder):
    _, res = quick_ladder
    for r in res.rows:
        if r.get("measured"):
            assert r["quietness"]["verdict"] in ("quiet", "disturbed", "unknown")
            if r["verdict"] not in ("reference", "n/a"):
                assert r["blocks"] and all("quietness" in b for b in r["blocks"])



def _row(rung, **kw):
    base = {"rung": rung, "step_s": 0.2, "tokens_per_s": 5120.0, "mfu": 0.25, "mfu_basis_label": "fp32 ceiling",
            "verdict": "reference" if rung == "baseline" else "adopted", "explain": f"{rung} did this", "note": ""}
    return {**base, **kw}


def test_no_verdict_is_told_from_a_busy_machine():
    rows = [_row("baseline", quietness={"verdict": "quiet"}), _row("bf16", busy=True, verdict="inconclusive"),
            _row("adamw"), _row("numa", verdict="n/a", note="one NUMA node here", explain="")]
    res = runner.LadderResult("smoke", "cpu", rows, None, "t.jsonl")
    assert [r["rung"] for r in res.told_rungs()] == ["adamw", "numa"]
    assert runner.told(rows[0]) and not runner.told(_row("baseline", quietness={"verdict": "disturbed"}))
    table = res.explain_table()
    assert list(table["rung"]) == ["bf16", "adamw", "numa"] and table.loc[2, "here"] == "one NUMA node here"
    assert res.baseline_line() == "step 200 ms, 5,120 tokens/s, MFU 25.0 % against the fp32 ceiling"


def test_what_the_lesson_climbs_is_said_with_its_rules():
    from perflab.tune import verdict

    text = runner.describe(tune_preset("cpu")).splitlines()
    assert text[0].startswith("preset cpu: ") and "memory budget 40 MiB" in text[1]
    assert text[2] == f"Verdicts: {verdict.rule()}." and text[3] == f"Noise: {verdict.noise_rule()}."
    assert "`perflab tune --preset cpu` read the same saved measurements" in text[4]
