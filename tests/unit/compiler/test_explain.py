"""Tests of `perflab.compiler.explain`."""

from perflab.compiler import explain


def test_explain_recompiles_names_each_setting():
    rows = [{"setting": "static (dynamic=False)", "graphs after s=16": 1, "graphs after s=24": 2, "graphs after s=32": 3},
            {"setting": "mark_dynamic", "graphs after s=16": 1, "graphs after s=24": 1, "graphs after s=32": 1}]
    text = explain.explain_recompiles(rows)
    assert "static (dynamic=False): 3 graphs after 3 lengths" in text
    assert "mark_dynamic: 1 graph after 3 lengths" in text and "shape guard" in text
