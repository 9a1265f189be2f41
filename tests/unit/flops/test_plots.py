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
