"""Lesson 11's ladder: rungs as data, cumulative application, parity, resume, the waterfall, the CLI."""

import json

import pytest
import torch
from clirun import perflab

from perflab.core.errors import InputError
from perflab.tune import ladder, published, runner, waterfall

CPU = torch.device("cpu")
QUICK = "baseline,adamw,vocab64,numa"  # seconds on the smoke preset: no compile


def test_every_rung_names_its_change_and_its_lesson():
    assert ladder.RUNG_NAMES[0] == "baseline" and len(set(ladder.RUNG_NAMES)) == len(ladder.RUNGS) == 10
    for r in ladder.RUNGS:
        assert r.changes and r.why and r.lesson[:2].isdigit(), r


@pytest.mark.parametrize("text,want", [("sdpa,compile", ("baseline", "sdpa", "compile")),
                                       ("baseline, Batch", ("baseline", "batch")), (None, ladder.RUNG_NAMES)])
def test_rungs_are_parsed_in_order_with_the_baseline_first(text, want):
    assert ladder.parse_rungs(text) == want


@pytest.mark.parametrize("text,msg", [("flash", "unknown rung 'flash'"), ("sdpa,sdpa", "named twice"),
                                      ("sdpa,baseline", "must come first"), (",", "empty")])
def test_bad_rungs_are_one_line(text, msg):
    with pytest.raises(InputError, match=msg) as e:
        ladder.parse_rungs(text)
    assert "\n" not in str(e.value)


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


def test_numa_rung_is_not_applicable_on_one_node(monkeypatch):
    from perflab.numa import topology

    one = topology.Topology([topology.Node(0, [0, 1], None)], [[10]], [], [0, 1])
    monkeypatch.setattr(topology, "read_topology", lambda *a, **k: one)
    ch = runner.apply_rung("numa", runner.StepConfig(), ladder.preset("smoke"), CPU, [])
    assert not ch.applicable and "one NUMA node" in ch.note
    two = topology.Topology([topology.Node(0, [0], None), topology.Node(1, [1], None)], [[10, 20], [20, 10]], [], [0, 1])
    monkeypatch.setattr(topology, "read_topology", lambda *a, **k: two)
    assert runner.apply_rung("numa", runner.StepConfig(), ladder.preset("smoke"), CPU, []).config.numa_node == 0


def test_waterfall_splits_a_step_without_counting_a_second_twice():
    from perflab.profiling.trace import synthetic_step

    raw = synthetic_step("data_wait", steps=2)
    # an optimizer span at the end of each step (torch names it Optimizer.step#AdamW.step)
    raw["traceEvents"] += [{"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#AdamW.step", "pid": 1,
                            "tid": 1, "ts": s * 10_000.0 + 8_000, "dur": 1_500.0} for s in range(2)]
    bd = waterfall.breakdown_of_trace(raw, step_s=0.010)
    assert set(bd) == set(waterfall.CATEGORIES)
    assert sum(bd.values()) == pytest.approx(0.010)
    assert bd["optimizer"] == pytest.approx(0.0015) and bd["data_wait"] == pytest.approx(0.004, rel=0.05)
    assert bd["compute"] > 0 and bd["host_sync"] == 0


def test_published_figures_carry_their_source():
    for r in published.rows():
        assert all(r.get(k) not in (None, "") for k in published.REQUIRED), r
        assert r["url"].startswith("https://github.com/karpathy/") and len(r["commit"]) == 40
    assert published.compile_speedup() == pytest.approx(0.250 / 0.135)
    assert published.not_shown() and "llm.c" in published.not_shown()[0]["what"]
    assert list(published.frame()["Published"]) == [r["figure"] for r in published.rows()]


@pytest.fixture(scope="module")
def quick_ladder(tmp_path_factory):
    path = tmp_path_factory.mktemp("tune") / "tune_smoke.jsonl"
    return path, runner.run_ladder("smoke", QUICK, steps=1, device=CPU, path=path, profile=True)


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


def test_the_report_part_summarises_the_ladder(monkeypatch, tmp_path):
    from perflab.core.device import describe
    from perflab.course import report as R

    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    monkeypatch.setattr(R, "QUICK_TUNE_RUNGS", "baseline,numa")
    assert "tune" in R.select_parts()
    out = R.part_tune(R.Ctx(CPU, describe(CPU), quick=True))
    figs = {f["key"]: f for f in out["figures"]}
    assert figs["tune.speedup"]["value"] > 0 and figs["tune.baseline_tokens_per_s"]["unit"] == "tokens/s"
    assert [r["rung"] for r in out["data"]["rows"]] == ["baseline", "numa"] and "smoke preset" in out["summary"]
