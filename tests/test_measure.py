import pytest
import torch

from perflab.core.errors import InputError, UnsupportedError
from perflab.core.measure import (
    make_matmul,
    measure_copy_bandwidth,
    measure_host_to_device,
    measure_matmul,
)


def test_measure_matmul_cpu():
    r = measure_matmul(256, 128, 64, "fp32", "cpu", rep_ms=10)
    assert r.tflops == pytest.approx(2 * 256 * 128 * 64 / r.median_s / 1e12)
    assert r.rel_error < 1e-5 and r.n_reps >= 5
    assert r.device == "cpu" and r.peak_source in {"estimate", "unknown"}


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_half_precision_on_cpu(dtype):
    r = measure_matmul(64, 64, 64, dtype, "cpu", rep_ms=5)
    assert r.rel_error < 2e-2


def test_operands_are_random_not_zero():
    fn, a, b = make_matmul(16, 16, 16, "fp32", "cpu")
    assert a.abs().sum() > 0 and b.abs().sum() > 0 and not torch.equal(a, b)


def test_bad_inputs():
    with pytest.raises(InputError):
        measure_matmul(0, 8, 8)
    with pytest.raises(InputError, match="GiB"):
        measure_matmul(10**6, 10**6, 10**6, "fp32", "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(UnsupportedError):
            measure_matmul(8, 8, 8, "tf32", "cpu")


def test_copy_bandwidth_cpu():
    r = measure_copy_bandwidth(8 * 2**20, "cpu", rep_ms=20)
    assert r.moved_bytes == 2 * r.nbytes and r.gbps > 0.1
    assert r.spec_gbps is None  # no spec for a CPU's memory system


def test_host_to_device_needs_gpu():
    with pytest.raises(UnsupportedError, match="GPU"):
        measure_host_to_device(1024, device="cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp32", "tf32", "bf16", "fp16"])
def test_matmul_gpu_dtypes(dtype):
    r = measure_matmul(2048, 2048, 2048, dtype, "cuda")
    assert r.tflops > 0 and (r.peak_fraction is None or r.peak_fraction < 1.2)


@pytest.mark.gpu
def test_tf32_faster_than_fp32_on_ampere_plus():
    if torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("needs compute capability 8.0+")
    fp32 = measure_matmul(4096, 4096, 4096, "fp32", "cuda").tflops
    tf32 = measure_matmul(4096, 4096, 4096, "tf32", "cuda").tflops
    assert tf32 > 1.5 * fp32
    assert not torch.backends.cuda.matmul.allow_tf32  # restored


@pytest.mark.gpu
def test_pinned_faster_than_pageable():
    pinned = measure_host_to_device(256 * 2**20, pinned=True)
    pageable = measure_host_to_device(256 * 2**20, pinned=False)
    assert pinned.gbps > pageable.gbps


@pytest.mark.gpu
def test_device_copy_against_spec():
    r = measure_copy_bandwidth(2 * 2**30, "cuda")
    if r.spec_gbps:
        assert 0.5 < r.spec_fraction < 1.05
