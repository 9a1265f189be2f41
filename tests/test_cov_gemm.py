"""The GEMM package's edges: the Triton tile's and matmul's refusals, SM counts and architectures
from names, compile targets, and lab 04's table of predicted against measured cliffs."""

from __future__ import annotations

import pytest
import torch

from perflab.core.errors import InputError
from perflab.gemm import compiled, lab04, shapes
from perflab.gemm import triton_matmul as tm


@pytest.mark.parametrize("kw, words", [
    (dict(block_m=0), "block_m=0: a block size is a whole number ≥ 1"),
    (dict(block_n=8), "block_n=8: tl.dot needs tiles of at least 16 rows and columns"),
    (dict(block_m=1024), "block_m=1024: above 512 no tile of this kernel fits"),
    (dict(num_stages=9), "num_stages=9: use 1 to 8"),
    (dict(group_m=0), "group_m=0: use a whole number ≥ 1"),
])
def test_tile_config_refusals_say_what_to_use(kw, words):
    with pytest.raises(InputError) as e:
        tm.TileConfig(**kw)
    assert words in str(e.value)


@pytest.mark.skipif(not tm.available(), reason="Triton is not installed")
@pytest.mark.parametrize("a, b, words", [
    (torch.ones(2, 3, 4), torch.ones(4, 2), "matmul takes 2-D matrices (got 3-D and 2-D)"),
    (torch.ones(2, 3), torch.ones(4, 2), "inner sizes differ: A is (2, 3), B is (4, 2)"),
    (torch.ones(2, 3), torch.ones(3, 2, dtype=torch.float16), "A is torch.float32 and B is torch.float16"),
    (torch.ones(2, 3), torch.ones(3, 2, device="meta"), "A is on cpu and B on meta"),
])
def test_triton_matmul_refuses_operands_it_cannot_multiply(a, b, words):
    with pytest.raises(InputError) as e:
        tm.matmul(a, b)
    assert words in str(e.value)


def test_sm_counts_from_the_spec_table_and_refusals():
    sms, where = shapes.sm_count_of(gpu="h100-sxm")
    assert sms == 132 and where.startswith("NVIDIA H100")
    with pytest.raises(InputError, match="unknown GPU 'h999'"):
        shapes.sm_count_of(gpu="h999")
    assert shapes.sm_count_of() == (None, "no CUDA GPU here")


def test_architectures_by_compute_capability():
    assert shapes.arch_of("10.0") == ("blackwell", "10.0")
    assert shapes.arch_of("12.1")[0] == "blackwell"
    with pytest.raises(InputError, match="compute capability 6.1 predates Tensor Cores"):
        shapes.arch_of("6.1")


def test_compile_targets_in_the_forms_people_write():
    assert compiled.parse_target("9.0") == compiled.parse_target("sm_90") == 90
    with pytest.raises(InputError, match="give a CUDA architecture like sm_80"):
        compiled.parse_target("hopper")


def test_lab04_cliff_table():
    t = lab04.compare([512, 1024], [520, 2048], step=64)
    assert t.to_dict("records") == [
        {"predicted cliff": 512, "nearest measured drop": 520, "within one step": True},
        {"predicted cliff": 1024, "nearest measured drop": 520, "within one step": False}]
    assert lab04.compare([512], [], step=64)["nearest measured drop"].isna().all()
