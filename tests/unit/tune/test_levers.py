"""Tests of `perflab.tune.levers`: what each rung of the ladder acts on, in the waterfall's words."""

from perflab.tune import levers
from perflab.tune.waterfall import CATEGORIES


def test_every_rung_acts_on_parts_the_waterfall_names():
    assert levers.PARTS == CATEGORIES
    assert all(set(parts) <= set(CATEGORIES) for parts in levers.ACTS_ON.values())
    assert levers.ACTS_ON["compile"] == ("launch_overhead", "compute")


def test_a_rung_can_save_at_most_the_parts_it_acts_on():
    bd = {"compute": 0.1, "launch_overhead": 0.02, "data_wait": 0.5}
    assert levers.can_save("compile", bd) == 0.1 + 0.02
    assert levers.can_save("loader", bd) == 0.5 and levers.can_save("unknown", bd) == 0.1
