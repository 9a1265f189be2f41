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


def test_the_compile_figure_beside_the_rung_measured_here():
    from perflab.tune import published

    quiet = [{"rung": "compile", "speedup_vs_previous": 1.1, "verdict": "kept out"}]
    text = published.compile_text(quiet).splitlines()
    assert text[0].startswith("Published (nanoGPT README): torch.compile cut the iteration from ~")
    assert text[2] == "Here: the compile rung ran at 1.10× the step before it (kept out; it comes after the bf16 and SDPA rungs)."
    busy = published.compile_text([{**quiet[0], "busy": True, "verdict": "inconclusive"}])
    assert "measured while the machine was busy: no verdict (inconclusive)" in busy and "1.10×" not in busy
    assert "left to `perflab tune` in smoke runs" in published.compile_text([{"rung": "baseline"}])
    assert text[3].startswith("Published (nanoGPT commit 77e7e04c") and len(text) == 4 + len(published.not_shown())
