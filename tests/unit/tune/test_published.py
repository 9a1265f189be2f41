"""Tests of `perflab.tune.published`."""

from __future__ import annotations

import pytest

from perflab.tune import published


def test_an_unknown_published_figure_is_a_key_error():
    from perflab.tune import published

    with pytest.raises(KeyError):
        published.figure("no-such-figure")
    first = published.rows()[0]
    assert published.figure(first.id) == first


def test_published_figures_carry_their_source():
    for r in published.rows():
        assert all(getattr(r, k) not in (None, "") for k in published.REQUIRED), r
        assert r.url.startswith("https://github.com/karpathy/") and len(r.commit) == 40
    assert published.compile_speedup() == pytest.approx(0.250 / 0.135)
    assert published.not_shown() and "llm.c" in published.not_shown()[0].what
    assert list(published.frame()["Published"]) == [r.figure for r in published.rows()]


def test_vocab_padding_figure_is_read_from_the_commit_itself():
    r = published.figure("nanogpt_vocab_pad")
    assert r.url.endswith("/commit/" + r.commit) and len(r.commit) == 40
    assert r.section == "commit message"
    assert f"about {r.value}% faster" in r.quote and "50257 -> 50304" in r.quote
    assert r.approximate and r.unit == "% faster"


def test_compile_figure_says_what_the_model_was():
    for fid in ("nanogpt_eager", "nanogpt_compiled"):
        ctx = published.figure(fid).context or ""
        assert "written out" in ctx and "flash attention" in ctx and "bf16" in ctx
