"""Tests of `perflab.dataloading.starvation`."""

from __future__ import annotations

import numpy as np
import pytest

from perflab.core.errors import InputError
from perflab.dataloading import starvation


def test_prediction_with_a_zero_step_has_no_wait_share():
    p = starvation.Prediction(workers=0, load_s=0.0, compute_s=0.0, steady_wait_s=0.0, first_wait_s=0.0,
                              median_wait_s=0.0, step_s=0.0)
    assert p.wait_fraction == 0.0
    assert starvation.predict(4, 0.001, 0.0, 0.004, 1, 5).wait_fraction == pytest.approx(0.0)


def test_steady_state():
    assert starvation.steady_wait_s(0.02, 0.02, 0) == 0.02
    assert starvation.steady_wait_s(0.06, 0.02, 1) == pytest.approx(0.04)
    assert starvation.steady_wait_s(0.06, 0.02, 3) == 0.0
    # the seed's rule: with 2 workers no wait as long as a batch takes under 2 compute steps
    assert starvation.steady_wait_s(0.039, 0.02, 2) == 0.0 and starvation.steady_wait_s(0.041, 0.02, 2) > 0


def test_simulation_warm_up_then_steady():
    w = starvation.simulate(0.05, 0.02, 2, 40, startup_s=0.1)
    assert w[0] == pytest.approx(0.15)
    # in steady state the two workers' batches arrive together: waits alternate, their mean is the model's
    assert np.mean(w[-20:]) == pytest.approx(starvation.steady_wait_s(0.05, 0.02, 2), abs=1e-9)
    assert starvation.simulate(0.01, 0.02, 2, 20)[5:] == [0.0] * 15


def test_recommendation_and_cores():
    r = starvation.recommend(4, 0.005, 0.0, 0.02, cores=2)
    assert r.workers == 1
    r = starvation.recommend(32, 0.0, 0.01, 0.02, cores=2)
    assert r.workers is None and "cores, not the workers" in r.reason


def test_zero_workers_pay_the_loaders_own_per_batch_cost():
    # H0 is added to every 0-worker wait (and only there); workers pay the handover instead
    assert starvation.simulate(0.02, 0.01, 0, 3, inline_s=0.003) == [pytest.approx(0.023)] * 3
    assert starvation.steady_wait_s(0.02, 0.01, 0, inline_s=0.003) == pytest.approx(0.023)
    assert starvation.simulate(0.02, 0.05, 2, 6, inline_s=0.003) == starvation.simulate(0.02, 0.05, 2, 6)
    p = starvation.predict(4, 0.005, 0, 0.02, 0, 10, inline_s=0.002)
    assert p.median_wait_s == pytest.approx(0.022) and p.step_s == pytest.approx(0.042)
    with pytest.raises(InputError):
        starvation.simulate(0.02, 0.01, 0, 3, inline_s=-1)


def test_the_lessons_prediction_table_reads_in_milliseconds():
    t = starvation.predictions(4, 0.005, 0.0, 0.020, [0, 1, 2], 30, cores=2).table()
    assert list(t.index) == [0, 1, 2]
    assert t.loc[0, "L (one batch)"] == "20.0 ms" and t.loc[0, "steady wait"] == "20.0 ms" and t.loc[0, "step"] == "40.0 ms"
    assert t.loc[2, "steady wait"] == "0 ms"
