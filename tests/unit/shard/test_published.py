"""Tests of `perflab.shard.published`."""

import pytest

from perflab.core.errors import InputError
from perflab.shard import published


def test_published_tables_carry_their_source_and_agree_with_themselves():
    for tid in published.table_ids():
        t = published.table(tid)
        assert "github.com/pytorch/torchtitan/blob/" in t.attrs["source"] and len(t) >= 2
    a = published.table("async_tp_70b")
    assert (a.async_tp_tokens_per_s / a.vanilla_tp_tokens_per_s).round(2).tolist() == a.async_tp_speedup.tolist()
    with pytest.raises(InputError, match="unknown table"):
        published.table("nope")
