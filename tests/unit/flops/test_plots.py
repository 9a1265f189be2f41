"""Tests of `perflab.flops.plots`."""

import pytest


def test_grad_accum_prediction():
    import pandas as pd

    from perflab.flops.plots import grad_accum_prediction

    df = pd.DataFrame({"gas": [1, 2, 4], "tokens_per_step": [100, 200, 400], "step_s": [1.0, 1.9, 3.7],
                       "optimizer_s": [0.2, 0.2, 0.2]})
    pred = grad_accum_prediction(df)
    assert pred[0] == pytest.approx(100.0)  # the GAS = 1 point itself
    assert pred[1] == pytest.approx(100 / (0.8 + 0.1)) and pred[2] == pytest.approx(100 / (0.8 + 0.05))


def test_the_conventions_table_marks_amber_above_one_percent_and_red_above_ten():
    import pandas as pd

    from perflab.flops.plots import style_conventions

    df = pd.DataFrame({"flops_per_token": [1.0] * 3, "flops_per_step": [1.0] * 3, "vs_exact_model": [0.005, -0.05, 0.2],
                       "kind": ["model"] * 3, "counts": [""] * 3, "source": [""] * 3})
    html = style_conventions(df).to_html()
    assert html.count("#fde9b8") == 1 and html.count("#f8c9c4") == 1  # amber for 5 %, red for 20 %, none for 0.5 %
