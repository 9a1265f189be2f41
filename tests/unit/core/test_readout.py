"""Tests of `perflab.core.readout`."""

from __future__ import annotations

import sys

import pytest

from perflab.core import readout
from perflab.core.errors import InputError
from perflab.grading.checks import LabCheckError, grade
from perflab.workload.optim import make_optimizer


def test_readouts_of_missing_and_extreme_values():
    assert readout.num(True) == "True" and readout.num(float("nan")) == "n/a"
    assert readout.num(float("inf")) == "∞" and readout.num(float("-inf")) == "-∞"
    assert readout.seconds(None) == "n/a" and readout.seconds(2.5) == "2.50 s" and readout.seconds(3e-9) == "3.00 ns"
    assert readout.nbytes(None) == "–"
    r = readout.Readout("t", [("a", "1")], ["noisy: spread 30 %"])
    assert r.noisy and r.as_dict() == {"a": "1"}


def test_byte_readouts_and_optimizer_refusal():
    from perflab.core.readout import binary_bytes

    assert binary_bytes(None) == "–" and binary_bytes(3 * 2**30) == "3 GiB (3.22 GB)"
    assert binary_bytes(2048) == "2 KiB" and binary_bytes(1536) == "1.5 KiB" and binary_bytes(-3 * 2**20) == "-3 MiB"
    assert binary_bytes(2**31, decimal_too=False) == "2 GiB" and binary_bytes(12) == "12 B"
    with pytest.raises(InputError, match="unknown optimizer 'lion': use one of adamw, adamw-loop, adamw-foreach"):
        make_optimizer([], "lion")


def test_calling_the_perflab_function_is_refused_however_imported():
    from perflab.core import readout
    from perflab.core.readout import num as alias

    with pytest.raises(LabCheckError, match="calls perflab's perflab.core.readout.num"):
        grade("g", lambda x: len(alias(x)), [({"x": 1.5}, 3)], forbidden=[readout.num])
    assert grade("g", lambda x: len(f"{x}"), [({"x": 1.5}, 3)], forbidden=[readout.num])
    assert sys.getprofile() is None  # the watch leaves no profiler behind


def test_a_quietness_cell_and_plain_figures():
    from perflab.core.quietness import UNKNOWN, Quietness

    assert readout.machine(Quietness("quiet", 0.0, 1.0, 2, 0.0, 2, "")) == "quiet"
    busy = Quietness("disturbed", 0.6, 1.0, 2, 1.2, 2, "other programs used 60 % of 2 cores")
    assert readout.machine(busy) == "busy: other programs used 60 % of 2 cores"
    assert readout.machine(UNKNOWN) == "unknown: not measured" and readout.machine(None) == "unknown"
    assert readout.plain(0.8) == "0.8" and readout.plain(1979.0) == "1,979" and readout.plain(989.4) == "989.4"


def test_a_number_rounded_up_a_decade_keeps_its_significant_digits():
    # 0.9987 to 2 digits is 1.0, not 1.00 (three digits the measurement does not support)
    assert readout.num(0.9987, 2) == "1.0" and readout.num(0.9996, 3) == "1.00" and readout.num(99.96) == "100"
    assert readout.num(0.0316812690461387) == "0.0317" and readout.num(-0.9996, 2) == "-1.0"
