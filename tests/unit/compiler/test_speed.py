"""Tests of `perflab.compiler.speed`."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from perflab.compiler import explain, speed
from perflab.compiler.speed import Speed
from perflab.core.quietness import Quietness
from perflab.workload.models import build_model, preset
from perflab.workload.train import make_batches

QUIET = Quietness("quiet", 0.0, 1.0, 2, 0.0, 1, "")
BUSY = Quietness("disturbed", 0.6, 1.0, 2, 1.2, 1, "other programs used 60 % of 2 cores")


def test_break_even_and_gpu_modes():
    s = speed.Speed(eager_step_s=0.010, compiled_step_s=0.006, compile_s=20.0, mode="default")
    assert s.break_even_steps == 5000 and s.speedup == pytest.approx(10 / 6)
    assert math.isinf(speed.Speed(0.01, 0.02, 1.0, "default").break_even_steps)
    cpu = torch.device("cpu")
    assert speed.mode_skip_reason("default", cpu) is None
    assert "CUDA" in speed.mode_skip_reason("reduce-overhead", cpu)
    assert speed.mode_skip_reason("max-autotune", torch.device("cuda")) is None


def test_speed_measure_says_each_phase_before_it_runs():
    cfg = dataclasses.replace(preset("tiny-llama"), layers=1)
    batches = make_batches(cfg, 2, 16, n=1)
    said, built = [], []

    def model():
        built.append(len(said))  # how many phases were announced when each model was built
        return build_model(cfg)

    sp = speed.measure(model, batches, steps=1, backend="eager", progress=said.append)
    assert [m[:4] for m in said] == ["1/2 ", "2/2 "] and "(eager)" in said[1]
    assert built == [1, 2]  # each phase is announced before its model runs
    assert sp.eager_step_s > 0 and sp.compiled_step_s > 0 and sp.compile_s >= 0


def test_the_epsilons_the_lesson_quotes():
    assert torch.finfo(torch.bfloat16).eps == 2.0**-7   # the gap between 1 and the next bf16 number
    assert torch.finfo(torch.float32).eps == 2.0**-23
    one_plus_half_gap = torch.tensor(1 + 2.0**-8 * 0.99, dtype=torch.float32).to(torch.bfloat16)
    assert one_plus_half_gap.item() == 1.0               # rounding to nearest errs by at most 2^-8


def test_explain_speed_follows_the_measurement():
    faster = explain.explain_speed(Speed(0.010, 0.007, 3.0, "default"))
    assert "Faster" in faster and "1.4×" in faster and "pays for itself after 1,000 steps" in faster
    slower = explain.explain_speed(Speed(0.010, 0.013, 3.0, "default"))
    assert "Slower" in slower and "never pays off" in slower
    assert "Far slower" in explain.explain_speed(Speed(0.36, 3.4, 49.0, "default"))
    even = explain.explain_speed(Speed(0.010, 0.0098, 3.0, "default"))
    assert "Within ±10%" in even
    assert "eager kernels" in explain.explain_speed(Speed(0.01, 0.01, 0.5, "default"), backend="eager")
    assert math.isinf(Speed(0.01, 0.02, 1.0, "default").break_even_steps)


def test_speed_record_and_the_mode_passed_to_compile(monkeypatch):
    s = speed.Speed(eager_step_s=0.5, compiled_step_s=0.25, compile_s=5.0, mode="default")
    assert s.as_dict() == {"eager_step_s": 0.5, "compiled_step_s": 0.25, "speedup": 2.0, "compile_s": 5.0,
                           "break_even_steps": 20, "mode": "default"}
    calls = []

    def watched_steps(model, batches, steps, *, compile_kw=None, warmup=1):
        calls.append(compile_kw)
        return (4.0, 0.5, QUIET) if compile_kw is not None else (1.0, 0.25, QUIET)

    monkeypatch.setattr(speed, "watched_steps", watched_steps)
    said = []
    r = speed.measure(lambda: torch.nn.Linear(2, 2), [], 3, mode="max-autotune", backend="aot_eager", progress=said.append)
    assert calls == [None, {"backend": "aot_eager", "mode": "max-autotune"}]
    assert (r.eager_step_s, r.compiled_step_s, r.compile_s, r.mode) == (0.25, 0.5, 3.5, "max-autotune")
    assert r.quietness.verdict == "quiet" and r.headline() == 0.5
    assert said[1].startswith("2/2 compiled (aot_eager)")


def test_clear_cache_empties_the_folder_the_inductor_uses(tmp_path, monkeypatch):
    from perflab.compiler import speed

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    (tmp_path / "inductor" / "fxgraph").mkdir(parents=True)
    assert speed.cache_dir() == tmp_path / "inductor"
    assert speed.clear_cache() == tmp_path / "inductor" and not (tmp_path / "inductor").exists()


def test_the_speed_table_shows_every_figure_with_its_unit_and_the_machine():
    row = Speed(0.010, 0.007, 3.0, "default", QUIET).table().iloc[0].to_dict()
    assert row == {"eager step": "10 ms", "compiled step": "7 ms", "speedup": "1.4×", "compile": "3 s",
                   "break-even": "1,000 steps", "machine": "machine quiet"}
    never = Speed(0.010, 0.013, 3.0, "default").table().iloc[0]
    assert never["break-even"] == "never (no gain per step)" and never["machine"].startswith("quietness unknown")


def test_no_verdict_from_a_busy_machine():
    busy = Speed(0.010, 0.007, 3.0, "default", BUSY)
    assert busy.headline() is None and Speed(0.010, 0.007, 3.0, "default", QUIET).headline() == pytest.approx(10 / 7)
    assert busy.shown_speedup() == "1.43× (measured while the machine was busy: no verdict)"
    assert Speed(0.010, 0.007, 3.0, "default", QUIET).shown_speedup() == "1.43×"
    text = explain.explain_speed(busy)
    assert "inconclusive: the machine was busy (other programs used 60 % of 2 cores)" in text
    assert "Faster" not in text and "pays for itself" not in text and "Compiling took 3 s." in text


def test_the_modes_table_says_which_run_here():
    table = speed.modes_table(torch.device("cpu"))
    assert list(table["mode"]) == list(speed.MODES)
    assert table.set_index("mode").loc["default", "here"] == "runs"
    assert "needs a CUDA GPU" in table.set_index("mode").loc["reduce-overhead", "here"]


def test_the_timed_steps_carry_the_machines_quietness():
    import itertools

    from perflab.core.quietness import MadeUpLoad, injected

    cfg = dataclasses.replace(preset("tiny-llama"), layers=1)
    seconds = itertools.count(0.0, 1.0)  # a made-up clock: every reading one second after the last
    with injected(MadeUpLoad(0.9, clock=lambda: float(next(seconds)))):
        _, step_s, q = speed.watched_steps(build_model(cfg), make_batches(cfg, 2, 16, n=1), 2, warmup=0)
    assert step_s > 0 and q.disturbed
