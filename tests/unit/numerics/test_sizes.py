"""Lesson 16's sizes: one table, CPU GEMMs tiny (the CPU's fp8 GEMM is a reference loop)."""

import torch

from perflab.numerics import sizes


def test_the_table_by_where_it_runs():
    assert sizes.for_run(True, "cuda") is sizes.SIZES["smoke"]
    assert sizes.for_run(False, torch.device("cpu")) is sizes.SIZES["cpu"]
    assert sizes.for_run(False, "cuda:0") is sizes.SIZES["gpu"]
    for s in sizes.SIZES.values():
        assert all(n % 16 == 0 for n in s.gemm_sizes) and s.parity_window <= s.parity_steps
    assert max(sizes.SIZES["cpu"].gemm_sizes) <= 256
