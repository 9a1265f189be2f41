"""Tests of `perflab.memory.published`: the papers' figures beside perflab's estimate of them."""

from __future__ import annotations

import pytest

from perflab.memory import plots, published


def test_zero_figure1_beside_perflabs_estimate():
    z = published.zero_figure1()
    assert (z.params, z.dp) == (7.5e9, 64) and "ZeRO" in z.source
    t = z.table()
    assert list(t.columns) == ["ZeRO stage", "perflab (GB)", "paper (GB)"]
    assert list(t["paper (GB)"]) == ["120", "31.4", "16.6", "1.9"]
    for _, ours, paper in z.stages:  # the paper prints one decimal
        assert ours / 1e9 == pytest.approx(paper, abs=0.05)


def test_korthikanti_table2_for_gpt3s_layer():
    t2 = published.korthikanti_table2(2048, 12288, 96, t=8)
    rows = {c: b for c, _f, b in t2.rows}
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    assert rows["no parallelism"] == pytest.approx(s * b * h * (34 + 5 * a * s / h))
    assert rows["full recompute"] == pytest.approx(2 * s * b * h)
    assert rows["tensor + sequence parallel + selective recompute"] == pytest.approx(s * b * h * 34 / t)
    assert list(t2.table().columns) == ["configuration", "Table 2 formula", "bytes per layer (GB)"]
    assert t2.table()["bytes per layer (GB)"].iloc[0] == "2.87"


def test_the_references_keep_their_one_home():
    assert plots.references is published.references
    assert set(published.references()) >= {"zero_figure1", "korthikanti_table2"}
