"""The pool's reasons for leaving a candidate out say what the arithmetic says."""

from perflab.hunt import pool
from perflab.tune import rungmath


def test_the_unpadded_vocab_reason_names_alignment_not_empty_tiles():
    text = pool.NOT_HERE["unpadded_vocab"]
    p = rungmath.vocab_padding(50257, 64)
    assert p["tiles_unchanged"] and p["aligned"] == (False, True)  # what the sentence rests on
    assert "partly empty" not in text and "16 bytes" in text and "unchanged" in text
