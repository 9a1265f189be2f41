"""Tests of `perflab.tune.ladder`."""

from __future__ import annotations

import pytest

from perflab.core.errors import InputError
from perflab.tune import ladder


def test_every_rung_names_its_change_and_its_lesson():
    assert ladder.RUNG_NAMES[0] == "baseline" and len(set(ladder.RUNG_NAMES)) == len(ladder.RUNGS) == 10
    for r in ladder.RUNGS:
        assert r.changes and r.why and r.lesson[:2].isdigit(), r


@pytest.mark.parametrize("text,want", [("sdpa,compile", ("baseline", "sdpa", "compile")),
                                       ("baseline, Batch", ("baseline", "batch")), (None, ladder.RUNG_NAMES)])
def test_rungs_are_parsed_in_order_with_the_baseline_first(text, want):
    assert ladder.parse_rungs(text) == want


@pytest.mark.parametrize("text,msg", [("flash", "unknown rung 'flash'"), ("sdpa,sdpa", "named twice"),
                                      ("sdpa,baseline", "must come first"), (",", "empty")])
def test_bad_rungs_are_one_line(text, msg):
    with pytest.raises(InputError, match=msg) as e:
        ladder.parse_rungs(text)
    assert "\n" not in str(e.value)


def test_the_ladder_as_a_table_names_each_change_and_its_lesson():
    from perflab.tune import ladder

    table = ladder.table()
    assert list(table.columns) == ["rung", "what it changes", "lesson"]
    assert list(table["rung"]) == list(ladder.RUNG_NAMES) and table.loc[5, "lesson"] == "10 torch.compile"
