"""Tests of `perflab.gemm.waves`: tile and wave quantization."""

from __future__ import annotations

import math

import pytest

from perflab.core.errors import InputError
from perflab.gemm import waves


def test_tile_orientation_does_not_move_the_guides_full_wave():
    # 2304 is 9 tiles of 256 and 18 of 128, so 256×128 and 128×256 both fill one wave at N = 1536
    for tile in ((256, 128), (128, 256)):
        assert waves.wave_model(2304, 1536, 4096, sms=108, tile=tile).tiles == 108


@pytest.mark.parametrize("m,n,sms,tile", [(1000, 3000, 132, (128, 256)), (64, 64, 108, (256, 128)),
                                          (8192, 8192, 80, (128, 128)), (4097, 1, 114, (64, 64))])
def test_wave_model_identities(m, n, sms, tile):
    w = waves.wave_model(m, n, 512, sms=sms, tile=tile)
    assert w.tiles == math.ceil(m / tile[0]) * math.ceil(n / tile[1])
    assert w.waves == math.ceil(w.tiles / sms)
    assert 0 < w.utilization <= 1 and w.utilization == pytest.approx(w.tile_utilization * w.wave_utilization)
    assert w.utilization == pytest.approx(m * n / (w.waves * sms * tile[0] * tile[1]))
    assert 1 <= w.last_wave_tiles <= sms


def test_predicted_time_is_a_staircase_in_waves():
    kw = dict(sms=108, tile=(256, 128), peak_tflops=312.0)
    t1 = waves.predicted_time_s(2304, 1536, 4096, **kw)
    t2 = waves.predicted_time_s(2304, 1537, 4096, **kw)
    t3 = waves.predicted_time_s(2304, 3072, 4096, **kw)
    assert t2 == pytest.approx(2 * t1) and t3 == pytest.approx(t2)  # one wave → two waves, flat until full
    # a full wave runs at the peak
    assert waves.predicted_tflops(2304, 1536, 4096, **kw) == pytest.approx(312.0)
    # with a bandwidth, a skinny GEMM is memory-bound: the roofline takes over
    slow = waves.predicted_tflops(2304, 1536, 8, bandwidth_gbps=2039, itemsize=2, **kw)
    assert slow < 0.2 * 312


@pytest.mark.parametrize("text,want", [("256x128", (256, 128)), ("128×256", (128, 256)), ((64, 64), (64, 64)),
                                       (" 64 X 128 ", (64, 128))])
def test_parse_tile(text, want):
    assert waves.parse_tile(text) == want


@pytest.mark.parametrize("bad", ["256", "0x128", "ax4", "256x128x64", "-1x4"])
def test_parse_tile_rejects(bad):
    with pytest.raises(InputError):
        waves.parse_tile(bad)


@pytest.mark.parametrize("kw", [dict(m=0, n=4, k=4, sms=4), dict(m=4, n=-1, k=4, sms=4), dict(m=4, n=4, k=4, sms=0)])
def test_wave_model_rejects_bad_sizes(kw):
    with pytest.raises(InputError):
        waves.wave_model(kw.pop("m"), kw.pop("n"), kw.pop("k"), **kw)
