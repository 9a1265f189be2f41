"""The sweep rule on injected timings: a single spike never wins, a real step does, busy points decide nothing."""

from __future__ import annotations

import math

import pytest

from perflab.core import sweepnoise as sn
from perflab.core.sweepnoise import Measured, decide, noise, outliers, settle

QUIET = {"verdict": "quiet", "share": 0.01, "cause": "machine quiet"}
BUSY = {"verdict": "disturbed", "share": 0.48, "cause": "other programs used 48 % of 2 cores"}


def _flat(n=12, level=30.0, wiggle=0.005):
    # a smooth curve with ±0.5 % alternating scatter: the noise the rule should find
    return [level * (1 + (wiggle if i % 2 else -wiggle)) for i in range(n)]


def _first(values, q=QUIET):
    return {i: [Measured(v, None, q)] for i, v in enumerate(values)}


def test_the_noise_is_the_sweeps_own_scatter_and_one_spike_does_not_move_it():
    vals = _flat()
    base = noise(vals)
    assert base == pytest.approx(sn.MIN_NOISE)  # 0.5 % scatter sits under the 1 % floor
    wide = [v * (1 + (0.04 if i % 2 else -0.04)) for i, v in enumerate(_flat(wiggle=0))]
    assert 0.04 < noise(wide) < 0.2
    spiked = list(wide)
    spiked[5] *= 1.5
    assert noise(spiked) == pytest.approx(noise(wide), rel=0.35)
    assert outliers(spiked, noise(spiked)) == [5]


def test_the_timers_own_spread_is_a_floor_for_the_noise():
    assert noise(_flat(), spreads=[0.27] * 12) == pytest.approx(0.27 / 1.349)


def test_a_single_spike_is_measured_again_and_does_not_win():
    vals = _flat()
    vals[7] = 42.5  # one point 40 % above every other, as lesson 05 once printed
    calls = []

    def again(key, attempt):
        calls.append((key, attempt))
        return Measured(_flat()[key], None, QUIET)  # measured again, it is like its neighbours

    s = settle(list(range(12)), _first(vals), again)
    assert calls == [(7, 1), (7, 2)] and s.remeasured == 2
    best = s.best()
    assert best is not None and best.value < 31 and s.point(7).status == "ok"
    d = decide(best, s.point(0), s.sigma, "the fastest width")
    assert d.kind == "within the noise" and "within the noise" in d.text


def test_a_spike_that_does_not_repeat_consistently_is_unstable_and_cannot_win():
    vals = _flat()
    vals[7] = 42.5
    answers = iter([41.0, 30.0])
    s = settle(list(range(12)), _first(vals), lambda k, a: Measured(next(answers), None, QUIET))
    assert s.point(7).status == "unstable" and not s.point(7).eligible
    best = s.best()
    assert best is not None and best.key != 7 and s.notes and "cannot win" in s.notes[0]


def test_a_real_isolated_step_repeats_and_wins_beyond_the_noise():
    vals = _flat()
    vals[8] = 45.0  # an aligned width really is faster
    s = settle(list(range(12)), _first(vals), lambda k, a: Measured(45.0 * (1 + 0.002 * a), None, QUIET))
    assert s.point(8).status == "confirmed"
    best = s.best()
    assert best is not None and best.key == 8
    d = decide(best, s.point(0), s.sigma)
    assert d.kind == "choose" and d.speedup == pytest.approx(45.0 * 1.002 / vals[0], rel=1e-3)


def test_a_real_plateau_wins_without_being_called_a_spike():
    vals = [30.0] * 6 + [40.0] * 6
    s = settle(list(range(12)), _first(vals), lambda k, a: Measured(vals[k], None, QUIET))
    best = s.best()
    assert best is not None and best.value == 40.0 and all(p.eligible for p in s.points)
    assert decide(best, s.point(0), s.sigma).kind == "choose"


def test_a_disturbed_point_is_measured_again_and_a_quiet_measurement_replaces_it():
    vals = _flat()
    first = _first(vals)
    first[3] = [Measured(12.0, None, BUSY)]
    s = settle(list(range(12)), first, lambda k, a: Measured(_flat()[k], None, QUIET))
    p = s.point(3)
    assert not p.disturbed and p.value == pytest.approx(_flat()[3]) and sn.verdict_of(p.quietness) == "quiet"


def test_a_winner_that_stays_disturbed_is_inconclusive_and_says_why():
    vals = _flat()
    vals[4] = 60.0
    first = _first(vals)
    first[4] = [Measured(60.0, None, BUSY)]
    s = settle(list(range(12)), first, lambda k, a: Measured(60.0, None, BUSY), retries=1)
    p = s.point(4)
    assert p.disturbed
    d = decide(p, s.point(0), s.sigma)
    assert d.kind == "inconclusive" and d.text.startswith("inconclusive: the machine was busy (other programs used 48 %")


def test_without_a_measure_function_the_points_are_judged_as_they_are():
    vals = _flat()
    vals[7] = 42.5
    s = settle(list(range(12)), _first(vals))
    assert s.remeasured == 0 and s.point(7).status == "unstable" and s.best().key != 7


def test_the_margin_follows_the_noise():
    a, b = sn.Point("a", [Measured(1.05)]), sn.Point("b", [Measured(1.0)])
    assert decide(a, b, 0.01).kind == "choose"  # 5 % against a margin of exp(3·0.01·√2) ≈ 4.3 %
    assert decide(a, b, 0.02).kind == "within the noise"
    assert decide(a, b, 0.01).margin == pytest.approx(math.exp(3 * 0.01 * math.sqrt(2)))


def test_quietness_is_read_from_objects_dicts_or_nothing():
    class Q:
        verdict, cause = "disturbed", "3 other processes on the GPU"

        def to_json(self):
            return {"verdict": self.verdict, "cause": self.cause}

    assert sn.verdict_of(None) == "unknown" and sn.verdict_of(Q()) == "disturbed" and sn.verdict_of({"verdict": "x"}) == "unknown"
    assert sn.cause_of(Q()) == "3 other processes on the GPU" and sn.quietness_json(Q())["verdict"] == "disturbed"
    assert sn.bench_quietness(type("R", (), {"quietness": QUIET})()) is QUIET
    with sn.watching("cpu") as w:
        pass
    assert sn.bench_quietness(object(), w) is getattr(w, "result", None)
