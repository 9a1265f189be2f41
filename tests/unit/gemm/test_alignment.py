"""Tests of `perflab.gemm.alignment`: Tensor Core alignment per dtype and architecture."""

from __future__ import annotations

import pytest

from perflab.core.errors import InputError
from perflab.gemm import alignment


def test_architectures_past_the_table_are_blackwell():
    assert alignment.arch_of("13.0") == ("blackwell", "13.0")
    assert alignment.arch_of("11.2") == ("blackwell", "11.2")


def test_alignment_rule_as_dict_carries_the_element_multiples():
    d = alignment.tensor_core_alignment("fp16", "hopper").as_dict()
    assert (d["required_bytes"], d["recommended_bytes"], d["itemsize"]) == (16, 128, 2)
    assert (d["required"], d["recommended"]) == (8, 64)


def test_architectures_by_compute_capability():
    assert alignment.arch_of("10.0") == ("blackwell", "10.0")
    assert alignment.arch_of("12.1")[0] == "blackwell"
    with pytest.raises(InputError, match="compute capability 6.1 predates Tensor Cores"):
        alignment.arch_of("6.1")


def test_check_alignment_suggests_the_neighbours():
    checks = {c.dim: c for c in alignment.check_alignment(8192, 10922, 4096, "bf16", "a100-sxm-80gb")}
    assert checks["m"].ok_recommended and checks["k"].ok_recommended
    assert not checks["n"].ok_required and "10880 or 10944" in checks["n"].reason


def test_arch_of():
    assert alignment.arch_of("NVIDIA H100 80GB HBM3") == ("hopper", "9.0")
    assert alignment.arch_of("8.6") == ("ampere", "8.6")
    assert alignment.arch_of("a100-pcie-40gb") == ("ampere", "8.0")
    with pytest.raises(InputError):
        alignment.arch_of("tpu-v5")
