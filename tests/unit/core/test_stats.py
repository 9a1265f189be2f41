"""Tests of `perflab.core.stats`: one quantile rule, spreads, and medians compared by standard errors."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from perflab.core import stats


def test_quantiles_interpolate_as_numpy_does():
    xs = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6]
    for q in (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0):
        assert stats.quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)))
    assert stats.iqr([1, 2, 3, 4]) == pytest.approx(1.5)  # 3.25 - 1.75; statistics.quantiles' default gives 2.5
    q = statistics.quantiles([1, 2, 3, 4], n=4)
    assert q[2] - q[0] == pytest.approx(2.5)
    with pytest.raises(ValueError):
        stats.quantile([], 0.5)


def test_a_median_of_n_calls_has_a_standard_error_of_about_1_25_sigma_over_root_n():
    assert stats.median_se(0.1, 25) == pytest.approx(math.sqrt(math.pi / 2) * 0.1 / 5)
    rng = np.random.default_rng(0)
    medians = [float(np.median(rng.normal(1.0, 0.1, 25))) for _ in range(4000)]
    assert float(np.std(medians)) == pytest.approx(stats.median_se(0.1, 25), rel=0.08)


def test_noise_of_samples_reads_their_iqr_and_floors_the_standard_error():
    n = stats.Noise.of([1.0] * 20)
    assert n.sigma == 0.0 and n.se == stats.MIN_NOISE and not n.too_noisy
    n = stats.Noise.of([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    assert n.sigma == pytest.approx(stats.iqr(range(1, 9)) / 4.5 / stats.IQR_TO_SIGMA) and n.too_noisy
    assert stats.Noise.of([1.0, 2.0]).sigma == 0.0  # too few samples to read a spread from


def test_two_medians_differ_only_beyond_three_standard_errors():
    quiet = stats.Noise(0.05, 100)  # se 0.63 % → floored at 1 %
    assert stats.compare_medians(1.05, 1.0, quiet, quiet).verdict == "differ"
    assert stats.compare_medians(1.03, 1.0, quiet, quiet).verdict == "agree"
    c = stats.compare_medians(2.0, 1.0, stats.Noise(0.8, 20), quiet)
    assert c.verdict == "inconclusive" and not c.differ
    assert c.margin == pytest.approx(math.exp(stats.K * c.se))
    with pytest.raises(ValueError):
        stats.compare_medians(0.0, 1.0, quiet, quiet)
