"""Lab 04: its checks accept the reference answer and reject each plausible mistake with a hint."""

from __future__ import annotations

import pytest

from perflab.gemm import (
    lab04,
    shapes,
)
from perflab.gemm import lab04 as lab
from perflab.grading.checks import LabCheckError


def tiles(m, n, tile_m, tile_n):
    return -(-m // tile_m) * -(-n // tile_n)


def waves(tiles, sms):
    return -(-tiles // sms)


def predict_cliffs(m, k, n_values, tile, sms):
    out, prev = [], None
    for n in sorted(n_values):
        w = waves(tiles(m, n, *tile), sms)
        if prev is not None and w > prev:
            out.append(n)
        prev = w
    return out


def tiles_floor(m, n, tile_m, tile_n):  # the naive division the lesson warns about
    return (m // tile_m) * (n // tile_n)


def tiles_plus_one(m, n, tile_m, tile_n):  # off by one
    return (m // tile_m + 1) * (n // tile_n + 1)


def tiles_ignores_tile_n(m, n, tile_m, tile_n):  # ignores an input (square tiles assumed)
    return -(-m // tile_m) * -(-n // tile_m)


def tiles_by_area(m, n, tile_m, tile_n):  # fits sizes that are multiples of the tile only
    return -(-(m * n) // (tile_m * tile_n))


def waves_floor(tiles, sms):  # a partial wave forgotten
    return tiles // sms


def waves_plus_one(tiles, sms):  # off by one
    return tiles // sms + 1


def waves_ignores_sms(tiles, sms):  # ignores an input: the A100 of the lesson's example
    return -(-tiles // 108)


def cliffs_one_early(m, k, n_values, tile, sms):  # off by one
    out, prev, prev_n = [], None, None
    for n in sorted(n_values):
        w = waves(tiles(m, n, *tile), sms)
        if prev is not None and w > prev:
            out.append(prev_n)
        prev, prev_n = w, n
    return out


def cliffs_visible_example(m, k, n_values, tile, sms):  # special-cased to NVIDIA's example
    return predict_cliffs(m, k, n_values, tile, sms) if (m, sms) == (2304, 108) else []


def cliffs_swapped_tile(m, k, n_values, tile, sms):  # wrong convention for the tile's sides
    return predict_cliffs(m, k, n_values, (tile[1], tile[0]), sms)


def cliffs_calls_perflab(m, k, n_values, tile, sms):
    from perflab.gemm.shapes import cliffs

    return cliffs("n", n_values, {"m": m, "k": k}, sms=sms, tile=tile)


def tiles_calls_perflab(m, n, tile_m, tile_n):

    return shapes.ceil_div(m, tile_m) * shapes.ceil_div(n, tile_n)


MUTANTS = [
    (lab.check_tiles, tiles_floor, "rounded down"),
    (lab.check_tiles, tiles_plus_one, "off by one"),
    (lab.check_tiles, tiles_ignores_tile_n, "ignores an input"),
    (lab.check_tiles, tiles_by_area, "divides the areas"),
    (lab.check_tiles, tiles_calls_perflab, "calls perflab"),
    (lab.check_waves, waves_floor, "partial wave"),
    (lab.check_waves, waves_plus_one, "off by one"),
    (lab.check_waves, waves_ignores_sms, "ignores an input"),
    (lab.check_cliffs, cliffs_one_early, "one step early"),
    (lab.check_cliffs, cliffs_visible_example, "fits only some"),
    (lab.check_cliffs, cliffs_swapped_tile, "other way round"),
    (lab.check_cliffs, cliffs_calls_perflab, "calls perflab"),
]


def test_lab04_measured_drops():
    assert lab04.measured_drops([128, 256, 384, 512], [10.0, 9.5, 5.0, 4.9]) == [384]
    assert lab04.measured_drops([128, 256, 384], [10.0, 8.0, 7.9], threshold=0.25) == []


def test_lab04_cliff_table():
    t = lab04.compare([512, 1024], [520, 2048], step=64)
    assert t.to_dict("records") == [
        {"predicted cliff": 512, "nearest measured drop": 520, "within one step": True},
        {"predicted cliff": 1024, "nearest measured drop": 520, "within one step": False}]
    assert lab04.compare([512], [], step=64)["nearest measured drop"].isna().all()


@pytest.mark.parametrize(("check", "mutant", "keyword"), MUTANTS, ids=[m.__name__ for _c, m, _k in MUTANTS])
def test_mutant_is_rejected_with_a_hint_naming_the_mistake(check, mutant, keyword):
    with pytest.raises(LabCheckError, match="Hint") as err:
        check(mutant)
    assert keyword in str(err.value), str(err.value)


def test_reference_solution_passes():
    assert lab.check_tiles(tiles) and lab.check_waves(waves) and lab.check_cliffs(predict_cliffs)
