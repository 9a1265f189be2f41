"""The pool's reasons for leaving a candidate out say what the arithmetic says."""

from perflab.hunt import pool
from perflab.tune import rungmath


def test_the_unpadded_vocab_reason_names_alignment_not_empty_tiles():
    text = pool.NOT_HERE["unpadded_vocab"]
    p = rungmath.vocab_padding(50257, 64)
    assert p["tiles_unchanged"] and p["aligned"] == (False, True)  # what the sentence rests on
    assert "partly empty" not in text and "16 bytes" in text and "unchanged" in text


def test_the_host_sync_regression_says_what_it_costs_on_a_cpu_and_on_a_gpu():
    what = pool.regression("host_stats").what
    assert "On a CPU nothing waits for a device" in what and "on a GPU" in what and "host sync" in what
    assert "what is planted" in pool.pool_table().columns


def test_a_full_collection_walks_tracked_containers_not_every_object():
    what = pool.regression("gc").what
    assert "every Python object" not in what and "container" in what
