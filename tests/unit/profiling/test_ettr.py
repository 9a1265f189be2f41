"""Tests of `perflab.profiling.ettr`."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from perflab.cli import main
from perflab.core.errors import InputError
from perflab.profiling import ettr
from perflab.profiling import ettr as E

from .helpers import SETTINGS

pytest.importorskip("hypothesis", reason="hypothesis is not installed: pip install -e '.[test]'")


def test_exact_ettr_is_zero_where_the_exponential_overflows():
    assert ettr.ettr_exact(interval=800, ckpt_cost=0, restart=0, mtbf=1) == 0.0
    assert ettr.ettr_exact(interval=1, ckpt_cost=0, restart=800, mtbf=1) == 0.0
    assert ettr.ettr_exact(interval=600, ckpt_cost=0, restart=0, mtbf=1) > 0.0


@pytest.mark.parametrize("v, words", [("soon", "must be a number (got 'soon')"), (float("nan"), "> 0 and finite"),
                                      (-1, "> 0 and finite (got -1)")])
def test_ettr_inputs_must_be_positive_numbers(v, words):
    with pytest.raises(InputError) as e:
        ettr._pos("hours", v)
    assert words in str(e.value)


def test_ettr_refusals_name_the_models_and_the_gpu_count():
    with pytest.raises(InputError, match="model must be one of exact, first_order \\(got 'linear'\\)"):
        ettr.optimal_interval(1.0, 5.0, 100.0, model="linear")
    with pytest.raises(InputError, match="model must be one of exact, first_order"):
        ettr.sweep_intervals(8, 1000.0, 1.0, 5.0, [10, 20], model="linear")
    with pytest.raises(InputError, match="gpus must be a whole number ≥ 1 \\(got 2.5\\)"):
        ettr.ettr(24, 2.5, 1000.0, 1.0, 5.0)
    given = ettr.ettr(24, 8, 1000.0, 1.0, 5.0, interval_minutes=30)
    assert 0 < given.ettr < 1


def test_what_llama3s_failure_rate_needs_to_reach_90_percent():
    # lesson 09's claim: at Llama 3's interruption rate only checkpoint stalls under a minute reach
    # 90%, and the longer the restart, the shorter the stall must be
    llama = E.llama3_failure_rate()
    rows = E.needed_for(0.90, llama.job_mtbf_hours, [0.25, 0.5, 1, 2], [2, 5, 10, 20])
    assert not any(r.reaches for r in rows if r.ckpt_minutes >= 1)
    assert any(r.reaches for r in rows if r.ckpt_minutes < 1)
    for d in (0.25, 0.5):
        line = [r.ettr for r in rows if r.ckpt_minutes == d]
        assert line == sorted(line, reverse=True)
    reach_r = {d: max((r.restart_minutes for r in rows if r.ckpt_minutes == d and r.reaches), default=0)
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
    rows = {r.run.split()[0]: r for r in pub.rows}
    # Llama 3 (arXiv:2407.21783, §3.3.4): >90% effective training time on 16k GPUs; Gemini (arXiv:2312.11805, §3): 97%
    assert rows["Llama"].ettr_at_least == 0.90 and rows["Llama"].gpus == 16384
    assert rows["Gemini"].ettr_at_least == 0.97
    assert all(r.source for r in pub.rows) and set(pub.formulas) == {"young", "daly", "ettr_definition"}
    f = E.llama3_failure_rate()  # 419 unexpected interruptions in 54 days
    assert math.isclose(f.job_mtbf_hours, 54 * 24 / 419) and f.mtbf_hours_per_gpu == f.job_mtbf_hours * 16384
    assert list(E.published_table()["reported"]) == ["> 90.0 %", "97.0 %"]


@SETTINGS
@given(ckpt=st.floats(0.01, 600), restart=st.floats(0, 600), mtbf=st.floats(5, 1e6),
       model=st.sampled_from(["exact", "first_order"]))
def test_the_ettr_optimum_is_the_peak_of_the_curve_shown(ckpt, restart, mtbf, model):
    f = E.MODELS[model]
    best = E.optimal_interval(ckpt, restart, mtbf, model)
    top = f(best, ckpt, restart, mtbf)
    # the curve a lesson draws (mtbf is the job's, in minutes: 1 GPU of mtbf/60 hours)
    curve = E.curve_around_optimum(1, mtbf / 60, ckpt, restart, model=model)
    peak = max(curve, key=lambda p: p[1])
    assert math.isclose(peak[0], best, rel_tol=1e-9) or peak[1] <= top + 1e-12
    assert all(y <= top + 1e-12 for _, y in curve)
    # and no interval on a dense grid does better
    grid = [mtbf * 10 ** (k / 50) for k in range(-250, 51)]
    assert all(f(t, ckpt, restart, mtbf) <= top + 1e-9 for t in grid)
    # the first-order model is never above the exact one (it is the pessimistic one the lesson says)
    assert all(E.ettr_first_order(t, ckpt, restart, mtbf) <= E.ettr_exact(t, ckpt, restart, mtbf) + 1e-12
               for t in grid[::10])


# the job: delta 30 min, R 20 min, M 293 min -> 0.573 (first order: 0.543)
@pytest.mark.parametrize("ckpt, restart, mtbf, want", [(30, 20, 293, 0.573), (5, 2, 60, None), (0.5, 10, 5000, None)])
def test_exact_ettr_agrees_with_a_monte_carlo_job(ckpt, restart, mtbf, want):
    tau = E.optimal_interval(ckpt, restart, mtbf)
    exact = E.ettr_exact(tau, ckpt, restart, mtbf)
    mc = E.monte_carlo(tau, ckpt, restart, mtbf, work=tau * 40_000, seed=1)
    assert abs(mc - exact) < 0.005
    if want is not None:
        assert abs(exact - want) < 0.0005 and E.ettr_first_order(tau, ckpt, restart, mtbf) < want - 0.02


def test_the_lessons_failure_rate_and_reach_grid_read_for_a_person():
    llama = ettr.llama3_failure_rate()
    assert llama.describe().startswith("Llama 3's snapshot: one unexpected interruption every 3.09 h on 16384 GPUs")
    grid = ettr.reach_table(ettr.needed_for(0.90, llama.job_mtbf_hours, [0.25, 1], [2, 20]))
    assert list(grid.index) == ["15 s", "60 s"] and list(grid.columns) == ["R = 2 min", "R = 20 min"]
    assert grid.loc["15 s", "R = 2 min"].endswith(" ✓") and not grid.loc["60 s", "R = 20 min"].endswith("✓")
