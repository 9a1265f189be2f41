"""Tests of `perflab.gemm.tilefit`: which tile explains a measured staircase."""

from __future__ import annotations

import pytest

from perflab.core.errors import InputError
from perflab.gemm import tilefit


def test_fit_refuses_non_positive_times_and_a_falling_time_gets_no_slope():
    with pytest.raises(InputError, match="^measured times must be positive numbers$"):
        tilefit.fit_tile([128, 256, 384], [1e-3, 0.0, 2e-3], "n", {"m": 256, "k": 64}, sms=2)
    # waves 1, 2, 3, 4 while the time falls: a negative slope explains nothing, so the line is flat
    fit = tilefit.fit_tile([128, 256, 384, 512], [4e-3, 3e-3, 2e-3, 1e-3], "n", {"m": 256, "k": 64}, sms=2,
                          tiles=[(128, 128)], blocks_per_sm=[1])
    row = fit.best
    assert row["sec_per_wave"] == 0.0 and row["overhead_s"] == pytest.approx(2.5e-3) and row["steps"] == 3


def test_fit_tile_needs_points():
    with pytest.raises(InputError):
        tilefit.fit_tile([1, 2], [1.0, 2.0], "n", {"m": 8, "k": 8}, sms=4)
