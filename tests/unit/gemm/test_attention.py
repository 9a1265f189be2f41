"""Tests of `perflab.gemm.attention`."""

import pytest

from perflab.core.errors import InputError
from perflab.gemm import attention


def test_head_splits():
    """GPT-3 2.7B (Brown et al. 2020, Table 2.1): h = 2560 with 32 heads of 80; 2560 also splits into 20 of 128."""
    splits = attention.head_splits(2560, 32, 256)
    assert (32, 80) in splits and (20, 128) in splits and (40, 64) in splits
    assert all(a * d == 2560 for a, d in splits)
    with pytest.raises(InputError):
        attention.head_splits(97, 16, 64)  # a prime has no head size in range


def test_flops():
    assert attention.sdpa_flops(2, 8, 128, 64) == 4 * 2 * 8 * 128**2 * 64
    assert attention.sdpa_flops(2, 8, 128, 64, causal=True) == 2 * 2 * 8 * 128**2 * 64
    # every split of the same h does the same work
    assert len({attention.sdpa_flops(1, a, 256, d) for a, d in attention.head_splits(640)}) == 1


def test_padding_model():
    assert attention.padded_efficiency(64) == 1.0
    assert attention.padded_efficiency(80) == pytest.approx(80 / 96)
    assert attention.padded_efficiency(80, pad=64) == pytest.approx(80 / 128)
    u = attention.predicted_head_utilization(1, 32, 2048, 80, sms=132)
    assert 0 < u["utilization"] < u["pad_utilization"] <= 1


@pytest.mark.parametrize("causal", [False, True])
def test_measure_sdpa_checks_against_float64(causal):
    r = attention.measure_sdpa(1, 4, 64, 40, "fp32", "cpu", causal=causal, rep_ms=3, warmup_ms=1)
    assert r["rel_error"] < 1e-4 and r["tflops"] > 0 and r["flops"] == attention.sdpa_flops(1, 4, 64, 40, causal)


def test_sweep_head_size_smoke():
    res = attention.sweep_head_size(128, b=1, s=32, dtype="fp32", device="cpu", min_d=32, max_d=128, rep_ms=2,
                                    warmup_ms=1, progress=False)
    df = res.ok_frame()
    assert sorted(df["d"]) == [32, 64, 128] and (df["a"] * df["d"] == 128).all()
