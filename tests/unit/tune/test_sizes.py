"""Tests of `perflab.tune.sizes`: lesson 11's sizes by kind of run."""

from perflab.core.sizes import for_run
from perflab.tune.ladder import PRESETS, RUNG_NAMES
from perflab.tune.sizes import SIZES


def test_each_kind_of_run_climbs_its_own_preset():
    assert set(SIZES) == {"smoke", "cpu", "gpu"}
    for kind, s in SIZES.items():
        assert s.preset == kind and s.preset in PRESETS
    assert for_run(SIZES, False, "cpu").preset == "cpu" and for_run(SIZES, True, "cuda").preset == "smoke"


def test_smoke_leaves_the_compile_rung_and_the_graph_break_trace_out():
    assert SIZES["smoke"].rungs() == [r for r in RUNG_NAMES if r != "compile"] and not SIZES["smoke"].audit_breaks
    assert SIZES["cpu"].rungs() == list(RUNG_NAMES) == SIZES["gpu"].rungs()
    assert SIZES["smoke"].audit_seq <= dict(SIZES["smoke"].audit_model)["n_positions"]
    assert SIZES["cpu"].audit_seq <= dict(SIZES["cpu"].audit_model)["n_positions"]
