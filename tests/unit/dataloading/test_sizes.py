"""Tests of `perflab.dataloading.sizes`: lesson 07's table, read as the lesson reads it."""

import torch

from perflab.core.sizes import for_run
from perflab.dataloading.sizes import SIZES


def test_each_kind_of_run_gets_its_row_and_the_lessons_setting():
    assert for_run(SIZES, True, torch.device("cpu")) is SIZES["smoke"]
    assert for_run(SIZES, False, torch.device("cpu")) is SIZES["cpu"]
    assert for_run(SIZES, False, "cuda") is SIZES["gpu"]
    for s in SIZES.values():
        assert (s.batch, s.io_ms, s.transform_ms) == (4, 5.0, 0.0)  # the setting the predictions name


def test_worker_counts_around_this_machines_cores():
    assert SIZES["smoke"].worker_counts(2) == [0, 2]
    assert SIZES["cpu"].worker_counts(2) == [0, 1, 2, 4]
    assert SIZES["gpu"].worker_counts(16) == [0, 1, 2, 16, 18]
    assert SIZES["cpu"].compute_ms == 20.0 and SIZES["smoke"].compute_ms == 8.0
