"""The statistics every perflab measurement shares, in one place: quantiles and the IQR, robust
spreads, the standard error of a median, and whether two medians differ beyond their noise.

* **Quantiles** interpolate linearly between the sorted samples (Hyndman and Fan's type 7, NumPy's
  default `method="linear"`, R's default): q = 0.25 of [1, 2, 3, 4] is 1.75. `statistics.quantiles`
  defaults to another rule (type 6, "exclusive"), which gives 1.25 there; perflab uses this one
  everywhere, so a timer's spread and the audit's agree on the same samples.
* **Spread**: the IQR relative to the median (0.02: the middle half lies within about ±1 %).
  A normal's σ is IQR / 1.349 and 1.4826 × the median absolute deviation (MAD).
* **The standard error of a median** of n samples is about √(π/2) · σ / √n = 1.2533 σ / √n for
  normal samples (the median's asymptotic variance, π σ² / 2n: Kenney and Keeping, *Mathematics of
  Statistics*, 1962, §13.13). Two medians are compared by their standard errors, never by the
  spread of single calls, which is √n / 1.25 times wider.
* **Two medians differ** when |ln(a / b)| > K · √(se_a² + se_b²), K = 3 (three standard errors),
  each relative standard error at least `MIN_NOISE` (no two timings on a shared machine agree better
  than 1 %, whatever their n). When the calls themselves scatter by more than `TOO_NOISY` (σ of one
  call relative to the median), the comparison is *inconclusive*: a median of such calls moves with
  which moment of the machine it caught.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

IQR_TO_SIGMA = 1.349  # interquartile range → standard deviation of a normal
MAD_TO_SIGMA = 1.4826  # median absolute deviation → standard deviation of a normal
MEDIAN_SE = math.sqrt(math.pi / 2)  # standard error of a median / (σ / √n), normal samples (≈ 1.2533)
K = 3.0  # how many standard errors a difference must exceed
MIN_NOISE = 0.01  # 1 %: no timing on a shared machine is steadier than this
TOO_NOISY = 0.5  # a call's σ above half the median: medians of such calls are not compared


def quantile(xs: Sequence[float], q: float) -> float:
    """The `q` quantile (0 ≤ q ≤ 1) of `xs`, interpolating linearly between sorted samples (type 7)."""
    if not xs:
        raise ValueError("quantile of no samples")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q must be in [0, 1] (got {q})")
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def iqr(xs: Sequence[float]) -> float:
    """Interquartile range, p75 − p25 (0 for a single sample)."""
    return quantile(xs, 0.75) - quantile(xs, 0.25)


def spread(xs: Sequence[float]) -> float:
    """IQR / median (nan when the median is not positive)."""
    med = statistics.median(xs)
    return iqr(xs) / med if med > 0 else float("nan")


def sigma_of_spread(rel_iqr: float) -> float:
    """A normal's relative σ from a relative IQR."""
    return rel_iqr / IQR_TO_SIGMA


def mad(xs: Sequence[float]) -> float:
    """Median absolute deviation from the median."""
    med = statistics.median(xs)
    return statistics.median(abs(x - med) for x in xs)


def robust_sigma(xs: Sequence[float]) -> float:
    """σ estimated from the MAD (1.4826 × MAD): one outlier cannot move it."""
    return MAD_TO_SIGMA * mad(xs)


def median_se(rel_sigma: float, n: int) -> float:
    """Relative standard error of the median of `n` samples whose relative σ is `rel_sigma`."""
    return MEDIAN_SE * rel_sigma / math.sqrt(max(1, n))


@dataclass(frozen=True)
class Noise:
    """What is known of one median's noise: the σ of its single calls (relative) and how many calls."""

    sigma: float  # relative σ of one call (IQR / median / 1.349)
    n: int

    @classmethod
    def of(cls, xs: Sequence[float]) -> Noise:
        """From the samples themselves (σ 0 for fewer than 4 samples: their IQR says nothing yet)."""
        if len(xs) < 4:
            return cls(0.0, len(xs))
        s = spread(xs)
        return cls(sigma_of_spread(s) if math.isfinite(s) else float("inf"), len(xs))

    @property
    def se(self) -> float:
        """The median's relative standard error, at least MIN_NOISE."""
        return max(median_se(self.sigma, self.n), MIN_NOISE)

    @property
    def too_noisy(self) -> bool:
        return not self.sigma < TOO_NOISY


@dataclass(frozen=True)
class Comparison:
    """Two medians compared by their standard errors."""

    ratio: float  # a / b
    se: float  # relative standard error of the ratio, √(se_a² + se_b²)
    margin: float  # the ratio must leave [1 / margin, margin] to differ: exp(K · se)
    verdict: str  # 'agree', 'differ' or 'inconclusive'

    @property
    def differ(self) -> bool:
        return self.verdict == "differ"


def compare_medians(a: float, b: float, noise_a: Noise, noise_b: Noise) -> Comparison:
    """Whether medians `a` and `b` differ beyond K standard errors (module docstring); 'inconclusive'
    when either one's calls scatter by more than TOO_NOISY."""
    if not (a > 0 and b > 0):
        raise ValueError("medians to compare must be positive")
    se = math.hypot(noise_a.se, noise_b.se)
    margin = math.exp(K * se)
    ratio = a / b
    if noise_a.too_noisy or noise_b.too_noisy:
        verdict = "inconclusive"
    else:
        verdict = "differ" if abs(math.log(ratio)) > K * se else "agree"
    return Comparison(ratio, se, margin, verdict)
