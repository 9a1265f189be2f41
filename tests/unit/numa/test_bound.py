"""Tests of `perflab.numa.bound`."""

from __future__ import annotations

import pytest


def test_bound_without_a_target_prints_its_usage():
    from perflab.numa import bound

    with pytest.raises(SystemExit, match="usage: python -m perflab.numa.bound TARGET"):
        bound.main([])
