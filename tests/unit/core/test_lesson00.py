"""Tests of `perflab.core.lesson00`: lesson 00's sizes by kind of run."""

from __future__ import annotations

from perflab.core.lesson00 import SIZES
from perflab.core.sizes import for_run


def test_each_kind_of_run_has_its_sizes_and_the_gpu_the_largest():
    smoke, cpu, gpu = SIZES["smoke"], SIZES["cpu"], SIZES["gpu"]
    assert for_run(SIZES, True, "cuda") is smoke and for_run(SIZES, False, "cpu") is cpu
    assert for_run(SIZES, False, "cuda:0") is gpu
    for a, b in ((smoke, cpu), (cpu, gpu)):
        assert a.n_sync < b.n_sync and a.n_matmul < b.n_matmul and max(a.copy_mib) < max(b.copy_mib)
        assert a.panel_n < b.panel_n and a.panel_max_n < b.panel_max_n
    assert max(gpu.copy_mib) >= 2048  # past any GPU's L2
    assert cpu.n_denormal == gpu.n_denormal  # a CPU measurement on every machine
    for s in SIZES.values():
        assert list(s.copy_mib) == sorted(s.copy_mib) and s.panel_n <= s.panel_max_n
        assert s.panel_n & (s.panel_n - 1) == 0 and s.panel_max_n & (s.panel_max_n - 1) == 0  # the slider's powers of two
