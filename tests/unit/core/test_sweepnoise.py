"""The sweep rule on injected timings: a single spike never wins, a real step does, a jagged landscape
is not noise, busy points decide nothing."""

from __future__ import annotations

import math

import pytest

from perflab.core import sweepnoise as sn
from perflab.core.quietness import UNKNOWN, Quietness
from perflab.core.sweepnoise import Measured, decide, measured, noise, outliers, settle

QUIET = Quietness("quiet", 0.01, 0.1, 2, 0.0, 1, "")
BUSY = Quietness("disturbed", 0.48, 0.1, 2, 0.1, 1, "other programs used 48 % of 2 cores")


def _flat(n=12, level=30.0, wiggle=0.005):
    # a smooth curve with ±0.5 % alternating scatter
    return [level * (1 + (wiggle if i % 2 else -wiggle)) for i in range(n)]


def _first(values, q=QUIET):
    return {i: [Measured(v, None, q)] for i, v in enumerate(values)}


def _steady(values, drift=0.002):
    """A measure function that gives each point its value again, `drift` apart per attempt."""
    return lambda k, a: Measured(values[k] * (1 + drift * a), None, QUIET)


def test_the_noise_is_how_much_a_point_moves_when_measured_again():
    assert noise() == sn.MIN_NOISE  # nothing known: the 1 % floor
    assert noise(pairs=[(30.0, 30.15), (20.0, 19.9)]) == pytest.approx(sn.MIN_NOISE)  # 0.5 % apart: under the floor
    wide = noise(pairs=[(30.0, 33.0), (20.0, 18.0), (10.0, 11.0)])
    assert wide == pytest.approx(sn.MAD_TO_SIGMA * math.log(1.1) / math.sqrt(2), rel=0.1)


def test_the_timers_own_noise_is_a_floor_the_standard_error_of_its_median():
    one_call = Measured(1.0, 0.27)  # n unknown: one call's σ, IQR / median / 1.349
    assert noise([one_call]) == pytest.approx(0.27 / 1.349)
    of_25 = Measured(1.0, 0.27, n=25)  # the median of 25 calls: 1.2533 σ / 5
    assert noise([of_25]) == pytest.approx(math.sqrt(math.pi / 2) * 0.27 / 1.349 / 5)


def test_a_jagged_landscape_is_not_noise_and_its_aligned_peak_wins():
    # an H200's SwiGLU sweep: widths that are multiples of 8 run at ~670 TFLOP/s, the others at ~250; the
    # old rule took that scatter for noise (σ = 85 %) and called a 2.7× gain "within the noise"
    vals = [670.0 if i % 2 else 250.0 for i in range(24)]
    vals[11] = 688.0
    s = settle(list(range(24)), _first(vals), _steady(vals))
    assert s.sigma < 0.02, s.sigma
    best = s.best()
    assert best is not None and best.key == 11 and best.status == "confirmed"
    d = decide(best, s.point(0), s.sigma, "the fastest width")
    assert d.kind == "choose" and d.speedup == pytest.approx(688 * 1.004 / 250, rel=0.01)
    assert s.remeasured <= sn.CONTROLS + 2 * sn.MAX_EXAMINED  # not every aligned width measured again


def test_a_single_spike_is_measured_again_and_does_not_win():
    vals = _flat()
    vals[7] = 42.5  # one point 40 % above every other, as lesson 05 once printed
    calls = []

    def again(key, attempt):
        calls.append((key, attempt))
        return Measured(_flat()[key], None, QUIET)  # measured again, it is like its neighbours

    s = settle(list(range(12)), _first(vals), again)
    assert (7, 1) in calls and (7, 2) in calls
    best = s.best()
    assert best is not None and best.value < 31 and s.point(7).status == "ok"
    d = decide(best, s.point(0), s.sigma, "the fastest width")
    assert d.kind == "within the noise" and "within the noise" in d.text


def test_a_spike_that_does_not_repeat_consistently_is_unstable_and_cannot_win():
    vals = _flat()
    vals[7] = 42.5

    def again(k, a):
        if k == 7:
            return Measured({1: 41.0, 2: 30.0}[a], None, QUIET)
        return Measured(vals[k], None, QUIET)

    s = settle(list(range(12)), _first(vals), again)
    assert s.point(7).status == "unstable" and not s.point(7).eligible
    best = s.best()
    assert best is not None and best.key != 7 and any("cannot win" in n for n in s.notes)


def test_a_real_isolated_step_repeats_and_wins_beyond_the_noise():
    vals = _flat()
    vals[8] = 45.0  # an aligned width really is faster
    s = settle(list(range(12)), _first(vals), _steady(vals))
    assert s.point(8).status == "confirmed"
    best = s.best()
    assert best is not None and best.key == 8
    d = decide(best, s.point(0), s.sigma)
    assert d.kind == "choose"


def test_a_real_plateau_wins_without_being_called_a_spike():
    vals = [30.0] * 6 + [40.0] * 6
    s = settle(list(range(12)), _first(vals), lambda k, a: Measured(vals[k], None, QUIET))
    best = s.best()
    assert best is not None and best.value == 40.0 and all(p.eligible for p in s.points)
    assert decide(best, s.point(0), s.sigma).kind == "choose"


def test_a_noisy_machine_widens_the_noise_and_a_small_gain_stays_within_it():
    vals = _flat()
    vals[9] = 33.0  # 10 % above the rest
    jitter = iter([1.2, 0.85, 1.15, 0.9, 1.1, 0.95, 1.0, 1.0, 1.0, 1.0])  # measured again, points move ±15 %
    s = settle(list(range(12)), _first(vals), lambda k, a: Measured(vals[k] * next(jitter, 1.0), None, QUIET))
    assert s.sigma > 0.08
    best = s.best()
    assert best is not None and decide(best, s.point(0), s.sigma).kind == "within the noise"


def test_a_disturbed_point_is_measured_again_and_a_quiet_measurement_replaces_it():
    vals = _flat()
    first = _first(vals)
    first[3] = [Measured(12.0, None, BUSY)]
    s = settle(list(range(12)), first, lambda k, a: Measured(_flat()[k], None, QUIET))
    p = s.point(3)
    assert not p.disturbed and p.value == pytest.approx(_flat()[3]) and p.quietness.verdict == "quiet"


def test_a_winner_that_stays_disturbed_is_inconclusive_and_says_why():
    vals = _flat()
    vals[4] = 60.0
    first = _first(vals)
    first[4] = [Measured(60.0, None, BUSY)]
    s = settle(list(range(12)), first, lambda k, a: Measured(60.0 if k == 4 else vals[k], None, BUSY if k == 4 else QUIET),
               retries=1)
    p = s.point(4)
    assert p.disturbed
    d = decide(p, s.point(0), s.sigma)
    assert d.kind == "inconclusive" and d.text.startswith("inconclusive: the machine was busy (other programs used 48 %")


def test_without_a_measure_function_the_points_are_judged_as_they_are():
    vals = _flat()
    vals[7] = 42.5
    s = settle(list(range(12)), _first(vals))
    assert s.remeasured == 0 and s.point(7).status == "unconfirmed" and s.best().key != 7
    assert any("run-to-run noise not measured" in n for n in s.notes)


def test_only_points_above_their_neighbours_are_outliers():
    vals = _flat()
    vals[3], vals[7] = 20.0, 40.0
    assert outliers(vals, 0.01) == [7]


def test_the_margin_follows_the_noise():
    a, b = sn.Point("a", [Measured(1.05)]), sn.Point("b", [Measured(1.0)])
    assert decide(a, b, 0.01).kind == "choose"  # 5 % against a margin of exp(3·0.01·√2) ≈ 4.3 %
    assert decide(a, b, 0.02).kind == "within the noise"
    assert decide(a, b, 0.01).margin == pytest.approx(math.exp(3 * 0.01 * math.sqrt(2)))


def test_quietness_is_one_type_read_from_a_saved_row_at_the_edge():
    m = measured(1.0, 0.1, BUSY.to_json(), 20)
    assert m.quietness == BUSY and m.n == 20 and m.verdict == "disturbed"
    assert sn.quietness_of(None) is UNKNOWN and sn.quietness_of({"verdict": "x"}) is UNKNOWN
    assert sn.quietness_of(QUIET) is QUIET
    assert sn.controls(12) == [0, 4, 7, 11] and sn.controls(3) == [0, 1, 2]
