"""Lesson 11's published figures: the vocabulary padding commit and the context of nanoGPT's compile figure."""

from perflab.tune import published


def test_vocab_padding_figure_is_read_from_the_commit_itself():
    r = published.figure("nanogpt_vocab_pad")
    assert r["url"].endswith("/commit/" + r["commit"]) and len(r["commit"]) == 40
    assert r["section"] == "commit message"
    assert f"about {r['value']}% faster" in r["quote"] and "50257 -> 50304" in r["quote"]
    assert r["approximate"] and r["unit"] == "% faster"


def test_compile_figure_says_what_the_model_was():
    for fid in ("nanogpt_eager", "nanogpt_compiled"):
        ctx = published.figure(fid)["context"]
        assert "written out" in ctx and "flash attention" in ctx and "bf16" in ctx
