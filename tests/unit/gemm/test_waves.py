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


def test_the_guides_example_from_its_record():
    from perflab.course.reference import published

    ex = waves.GuideExample.from_record(published("nvidia_wave_example"))
    assert (ex.m, ex.k, ex.sms, ex.tile) == (2304, 4096, 108, (256, 128))
    assert ex.full_waves() == [1536, 3072, 4608] and ex.cliffs() == [1537, 3073] and ex.past == 1664
    t = ex.table()
    assert list(t["n"]) == [1408, 1536, 1537, 1664, 3072, 3073]
    assert list(t["waves"]) == [1, 1, 2, 2, 2, 3] and list(t["utilization"])[:3] == ["91.7 %", "100 %", "50.0 %"]
    assert "Source: NVIDIA" in ex.text() and "one more wave needed from n = [1537, 3073]" in ex.text()


def test_cliffs_predicted_for_a_sweep_and_for_the_guides_gpu_sweep():
    c = waves.predict_cliffs(range(32, 1025, 16), {"m": 512, "k": 512}, range(128, 6145, 32), {"m": 2304, "k": 4096},
                             sms=108)
    assert c.guide == (1568, 3104, 4640) and c.first_guide_cliff == 1568.0  # the first multiple of 32 past 1536
    assert [t for t, _ in c.sweep] == [(256, 128), (128, 256), (128, 128)]
    assert all(not cl for _, cl in c.sweep)  # 512×1024 is 16 tiles of 256×128 at most: never a second wave on 108 SMs
    assert "(none in this range)" in c.text() and "n in 128..6144: new waves start at n = [1568, 3104, 4640]" in c.text()
    h100 = waves.predict_cliffs([64], {"m": 64, "k": 64}, range(128, 6145, 32), {"m": 2304, "k": 4096}, sms=132)
    # 132 SMs: 14 columns of 9 tiles fill 126 slots, the 15th needs a second wave from n = 1793 (1824 on this grid)
    assert h100.first_guide_cliff == 1824.0
