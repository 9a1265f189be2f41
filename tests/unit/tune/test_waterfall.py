"""Tests of `perflab.tune.waterfall`."""

from __future__ import annotations

import pytest

from perflab.tune import waterfall


def test_moved_is_the_change_per_category_from_the_baseline():
    base = {"breakdown": {"compute": 0.010, "data_wait": 0.004, "optimizer": 0.002}}
    row = {"breakdown": {"compute": 0.009, "data_wait": 0.0, "optimizer": 0.002}}
    d = waterfall.moved(base, row)
    assert set(d) == set(waterfall.CATEGORIES)
    assert d["compute"] == pytest.approx(-0.001) and d["data_wait"] == pytest.approx(-0.004) and d["optimizer"] == 0.0
    assert waterfall.moved({}, row)["compute"] == pytest.approx(0.009)


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


def test_the_baselines_waterfall_and_the_ladders_in_the_digits_a_measurement_supports():
    from perflab.tune import waterfall

    base = {"rung": "baseline", "step_s": 0.884, "verdict": "reference", "lesson": "02 MFU vs HFU",
            "breakdown": {"compute": 0.49272, "data_wait": 0.35925, "host_sync": 3.58e-5, "launch_overhead": 0.00757,
                          "optimizer": 0.02456}}
    table = waterfall.breakdown_table(base).set_index("category")
    assert table.loc["compute", "per step"] == "493 ms" and table.loc["data wait", "share"] == "40.6 %"
    assert waterfall.largest(base) == "compute"
    rung = {**base, "rung": "adamw", "step_s": 0.14804, "verdict": "adopted", "adopted": True,
            "breakdown": {**base["breakdown"], "compute": 0.08142}}
    md = waterfall.markdown([base, rung]).splitlines()
    assert md[2].startswith("| baseline | 493 | 359 | 0.0358 | 7.57 | 24.6 | 884 | – | reference |")
    assert md[3].startswith("| adamw | 81.4 | 359 |") and "| 148 | -736 | adopted |" in md[3]
