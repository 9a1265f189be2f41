"""The `perflab` command line."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from perflab.commands import _args


def test_positive_int_takes_whole_exponents_only():
    assert _args.positive_int("1e3") == 1000 and _args.positive_int("4_096") == 4096
    with pytest.raises(argparse.ArgumentTypeError, match="whole number ≥ 1, got '2.5'"):
        _args.positive_int("2.5")


def test_json_writes_nan_and_inf_as_null(capsys):
    _args.emit({"a": math.nan, "b": [math.inf, 1.5]}, True)
    assert json.loads(capsys.readouterr().out) == {"a": None, "b": [None, 1.5]}
