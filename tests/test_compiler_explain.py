"""Lesson 10's numeric claims and its explain steps."""

import math

import torch

from perflab.compiler import explain
from perflab.compiler.speed import Speed


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


def test_explain_recompiles_names_each_setting():
    rows = [{"setting": "static (dynamic=False)", "graphs after s=16": 1, "graphs after s=24": 2, "graphs after s=32": 3},
            {"setting": "mark_dynamic", "graphs after s=16": 1, "graphs after s=24": 1, "graphs after s=32": 1}]
    text = explain.explain_recompiles(rows)
    assert "static (dynamic=False): 3 graphs after 3 lengths" in text
    assert "mark_dynamic: 1 graph after 3 lengths" in text and "shape guard" in text
