"""Tests of `perflab.core.validate`."""

from __future__ import annotations

import pytest

from perflab.core import (
    validate,
)
from perflab.core.errors import InputError


def test_fits_in_memory_allows_anything_when_the_free_memory_is_unknown():
    assert validate.fits_in_memory("a huge matmul", 10**18, None) is None
    with pytest.raises(InputError, match="^a huge matmul needs"):
        validate.fits_in_memory("a huge matmul", 10**18, 2**30)


@pytest.mark.parametrize("value, want", [(4.0, 4), ("+8", 8), (" 16 ", 16)])
def test_positive_int_takes_whole_numbers_written_otherwise(value, want):
    assert validate.positive_int("batch", value) == want


@pytest.mark.parametrize("value", [2.5, "eight", None, True])
def test_positive_int_refuses_what_is_not_a_whole_number(value):
    with pytest.raises(InputError, match=f"batch must be a whole number ≥ 1 \\(got {value!r}\\)"):
        validate.positive_int("batch", value)


def test_multiple_of_suggests_the_neighbours():
    with pytest.raises(InputError, match="m=40 must be a multiple of 16: try 32 or 48"):
        validate.positive_int("m", 40, multiple_of=16)
    with pytest.raises(InputError, match="m=10 must be a multiple of 16: try 16$"):
        validate.positive_int("m", 10, multiple_of=16)
