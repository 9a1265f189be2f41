"""Tests of `perflab.core.dtypes`."""

from __future__ import annotations

import pytest
import torch

from perflab.core import dtypes
from perflab.core.dtypes import (
    check_supported,
    fast_dtype,
    native_bf16,
    parse_dtype,
    supported_matmul_dtypes,
    unsupported_reason,
)
from perflab.core.errors import InputError, UnsupportedError
from perflab.gemm import (
    swiglu,
)


def test_fp8_is_refused_where_the_device_would_take_it(monkeypatch):
    """The SwiGLU search and the attention measurement refuse fp8 even on a device that runs it."""
    import perflab.core.dtypes as dtypes
    from perflab.gemm import heads

    monkeypatch.setattr(dtypes, "unsupported_reason", lambda dt, dev: None)
    with pytest.raises(InputError, match=r"^the SwiGLU search runs in bf16, fp16, tf32 or fp32 \(fp8 training needs"):
        swiglu.make_mlp_gemms(16, 16, 48, "fp8", "cpu")
    with pytest.raises(InputError, match="^attention is measured in bf16, fp16, tf32 or fp32$"):
        heads.measure_sdpa(1, 1, 16, 16, "fp8", "cpu")


def test_dtype_reasons_for_apple_gpus_and_other_devices():
    assert "Apple GPUs" in dtypes.unsupported_reason("fp64", torch.device("mps"))
    assert dtypes.unsupported_reason("bf16", torch.device("mps")) is None
    assert "device type 'meta'" in dtypes.unsupported_reason("fp32", torch.device("meta"))


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


@pytest.mark.parametrize("flags,native,said", [({"amx_bf16", "avx512f"}, True, "AMX bf16 tiles"),
                                               ({"avx512_bf16"}, True, "AVX-512 bf16"),
                                               ({"fp", "asimd", "bf16"}, True, "Arm bf16"),
                                               ({"avx2", "fma"}, False, "no bf16 instructions on this CPU")])
def test_native_bf16_reads_the_cpu_flags(flags, native, said):
    ok, why = native_bf16("cpu", flags=flags)
    assert ok is native and said in why


@pytest.mark.parametrize("flags,want,said", [({"amx_bf16", "amx_fp16"}, "bf16", "AMX bf16"),
                                             ({"avx512_bf16", "avx2"}, "bf16", "avx512_bf16"),
                                             ({"avx512_fp16", "avx2"}, "fp16", "native fp16"),
                                             ({"avx2", "fma"}, "fp32", "no bf16 instructions")])
def test_the_default_measurement_dtype_is_the_fastest_native_one(flags, want, said):
    dt, why = fast_dtype("cpu", flags=flags)
    assert dt.name == want and said in why


def test_the_default_dtype_on_this_cpu_follows_its_own_flags():
    from perflab.core.device import cpu_facts

    dt, _ = fast_dtype("cpu")
    native = bool({"amx_bf16", "avx512_bf16", "bf16"} & cpu_facts().flags)
    assert (dt.name == "bf16") is native
