"""Per-learner draws: stable, different between learners, never two regressions on one knob."""

import pytest

from perflab.core.errors import InputError
from perflab.hunt.draw import draw_for, reveal_draw, teacher_view
from perflab.hunt.pool import NAMES, regression


def test_a_draw_is_stable_and_hidden():
    a, b = draw_for("ada", 3), draw_for("ada", 3)
    assert reveal_draw(a) == reveal_draw(b) and len(reveal_draw(a)) == 3
    assert not any(n in repr(a) or n in a.token for n in NAMES)


def test_two_learners_draws_differ():
    draws = {reveal_draw(draw_for(f"learner{i}", 3)) for i in range(10)}
    assert len(draws) >= 8
    assert reveal_draw(draw_for("ada", 3)) != reveal_draw(draw_for("bob", 3))


def test_the_salt_changes_the_draw():
    assert {reveal_draw(draw_for("ada", 3, salt_=f"class{i}")) for i in range(6)} != {reveal_draw(draw_for("ada", 3))}


def test_a_regression_that_costs_nothing_here_is_redrawn():
    free = set(reveal_draw(draw_for("ada", 3)))
    costs = {n: (0.0 if n in free else 0.5) for n in NAMES}
    d = reveal_draw(draw_for("ada", 3, costs=costs))
    assert not free & set(d) and len(d) == 3


def test_conflicting_regressions_are_never_drawn_together():
    for i in range(40):
        d = reveal_draw(draw_for(f"x{i}", 4))
        assert not any(b in regression(a).conflicts for a in d for b in d)


def test_teacher_sets_k_and_pool_and_sees_each_draw(monkeypatch):
    monkeypatch.setenv("PERFLAB_HUNT_K", "2")
    monkeypatch.setenv("PERFLAB_HUNT_POOL", "gc,loader,host_stats")
    rows = teacher_view(["ada", "bob"])
    assert [r["k"] for r in rows] == [2, 2]
    assert all(set(r["regressions"].split(",")) <= {"gc", "loader", "host_stats"} for r in rows)
    monkeypatch.setenv("PERFLAB_HUNT_K", "two")
    with pytest.raises(InputError, match="whole number"):
        draw_for("ada")


def test_nothing_to_draw_is_one_line():
    with pytest.raises(InputError, match="nothing to draw"):
        draw_for("ada", 3, costs={})
