import pytest
import torch

from perflab.core.dtypes import (
    check_supported,
    parse_dtype,
    supported_matmul_dtypes,
    unsupported_reason,
)
from perflab.core.errors import InputError, UnsupportedError


@pytest.mark.parametrize("name,canon", [("bf16", "bf16"), ("bfloat16", "bf16"), ("torch.bfloat16", "bf16"), ("FP32", "fp32"),
                                        ("float32", "fp32"), ("half", "fp16"), ("tf32", "tf32"), ("float8_e4m3fn", "fp8")])
def test_parse(name, canon):
    assert parse_dtype(name).name == canon


def test_parse_torch_dtype():
    assert parse_dtype(torch.float16).name == "fp16"


def test_unknown_dtype_message():
    with pytest.raises(InputError, match="use one of"):
        parse_dtype("int3")


def test_cpu_support():
    assert unsupported_reason("fp32", "cpu") is None
    assert "fp32" in unsupported_reason("tf32", "cpu")
    with pytest.raises(UnsupportedError):
        check_supported("fp8", "cpu")
    assert supported_matmul_dtypes("cpu") == ["fp32", "bf16", "fp16"]
    assert parse_dtype("tf32").torch_dtype == torch.float32 and parse_dtype("tf32").math_mode == "tf32"
