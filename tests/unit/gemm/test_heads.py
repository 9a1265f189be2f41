"""Tests of `perflab.gemm.heads`."""

import pytest

from perflab.core.errors import InputError
from perflab.gemm import heads


def test_head_splits():
    """GPT-3 2.7B (Brown et al. 2020, Table 2.1): h = 2560 with 32 heads of 80; 2560 also splits into 20 of 128."""
    splits = heads.head_splits(2560, 32, 256)
    assert (32, 80) in splits and (20, 128) in splits and (40, 64) in splits
    assert all(a * d == 2560 for a, d in splits)
    with pytest.raises(InputError):
        heads.head_splits(97, 16, 64)  # a prime has no head size in range


def test_flops():
    assert heads.sdpa_flops(2, 8, 128, 64) == 4 * 2 * 8 * 128**2 * 64
    assert heads.sdpa_flops(2, 8, 128, 64, causal=True) == 2 * 2 * 8 * 128**2 * 64
    # every split of the same h does the same work
    assert len({heads.sdpa_flops(1, a, 256, d) for a, d in heads.head_splits(640)}) == 1


def test_padding_model():
    assert heads.padded_efficiency(64) == 1.0
    assert heads.padded_efficiency(80) == pytest.approx(80 / 96)
    assert heads.padded_efficiency(80, pad=64) == pytest.approx(80 / 128)
    u = heads.predicted_head_utilization(1, 32, 2048, 80, sms=132)
    assert 0 < u.utilization < u.pad_utilization <= 1 and u.tiles == 32 * 16 * 16 and u.waves == 63  # ⌈8192 / 132⌉


@pytest.mark.parametrize("causal", [False, True])
def test_measure_sdpa_checks_against_float64(causal):
    r = heads.measure_sdpa(1, 4, 64, 40, "fp32", "cpu", causal=causal, rep_ms=3, warmup_ms=1)
    assert r.rel_error < 1e-4 and r.tflops > 0 and r.flops == heads.sdpa_flops(1, 4, 64, 40, causal)


def test_sweep_head_size_smoke():
    res = heads.sweep_head_size(128, b=1, s=32, dtype="fp32", device="cpu", min_d=32, max_d=128, rep_ms=2,
                                    warmup_ms=1, progress=False)
    df = res.ok_frame()
    assert sorted(df["d"]) == [32, 64, 128] and (df["a"] * df["d"] == 128).all()


def _heads(tflops_by_d, quiet=None):
    from types import SimpleNamespace

    q = quiet or {"verdict": "quiet", "share": 0.0, "cause": "machine quiet"}
    rows = [{"params": {"h": 256, "a": 256 // d, "d": d, "b": 1, "s": 32, "dtype": "fp32", "causal": False},
             "status": "ok", "tflops": t, "spread": 0.01, "quietness": q} for d, t in tflops_by_d.items()]
    return SimpleNamespace(rows=rows)


def test_a_head_size_spike_is_measured_again_and_does_not_win():
    from perflab.gemm import heads

    curve = {16: 1.0, 32: 1.5, 64: 2.0, 128: 2.25, 256: 2.3}
    spiked = _heads({**curve, 32: 9.0})
    w = heads.fastest_head_size(spiked, measure=lambda p: {"tflops": curve[p["d"]], "spread": 0.01,
                                                                 "quietness": {"verdict": "quiet", "share": 0.0}})
    assert w.d == 256 and "within the noise" in w.text and not w.decisive


def test_a_clear_head_size_winner_is_named_beyond_the_noise_and_a_busy_one_is_inconclusive():
    from perflab.gemm import heads

    curve = {16: 1.0, 32: 1.5, 64: 2.0, 128: 3.0, 256: 2.0}
    same = {"tflops": 3.0, "spread": 0.01, "quietness": {"verdict": "quiet", "share": 0.0}}
    w = heads.fastest_head_size(_heads(curve), measure=lambda p: {**same, "tflops": curve[p["d"]]})
    assert w.d == 128 and w.decisive and w.text.endswith("beyond the noise") and "1.50×" in w.text
    busy = {"verdict": "disturbed", "share": 0.5, "cause": "other programs used 50 % of 2 cores"}
    b = heads.fastest_head_size(_heads(curve, busy), measure=lambda p: {**same, "tflops": curve[p["d"]],
                                                                            "quietness": busy})
    assert not b.decisive and "inconclusive: the machine was busy (other programs used 50 %" in b.text


def _sizes(curve, quiet=None, measure=None):
    """A `HeadSizes` built the way `measure_head_sizes` builds it, from made-up rows and timings."""
    from perflab.core.results import SweepResult

    rows = [{**r, "seconds": heads.sdpa_flops(1, r["params"]["a"], 32, r["params"]["d"]) / (r["tflops"] * 1e12)}
            for r in _heads(curve, quiet).rows]
    same = {"spread": 0.01, "quietness": quiet or {"verdict": "quiet", "share": 0.0}}
    w = heads.fastest_head_size(_heads(curve, quiet), measure=measure or (lambda p: {**same, "tflops": curve[p["d"]]}))
    return heads.HeadSizes(256, 1, 32, SweepResult(__import__("pathlib").Path("h.jsonl"), rows), w)


@pytest.mark.parametrize("curve, answer", [
    ({16: 1.0, 32: 1.5, 64: 2.0, 128: 3.0, 256: 2.0}, "one in between"),
    ({16: 1.0, 32: 1.5, 64: 2.0, 128: 2.0, 256: 3.0}, "the largest d"),
    ({16: 3.0, 32: 1.5, 64: 2.0, 128: 2.0, 256: 1.0}, "the smallest d"),
])
def test_the_fastest_end_is_named_only_beyond_the_noise(curve, answer):
    run = _sizes(curve)
    assert run.winner.decisive and run.answer() == answer
    t = run.table()
    assert list(t.columns) == ["heads a", "head size d", "time", "TFLOP/s"] and list(t["head size d"]) == sorted(curve)


def test_no_end_is_named_within_the_noise_or_on_a_busy_machine():
    close = {16: 1.0, 32: 1.5, 64: 2.0, 128: 2.25, 256: 2.3}
    assert _sizes(close).answer() is None  # 256 beats 128 by 2 %: within the noise
    busy = {"verdict": "disturbed", "share": 0.5, "cause": "other programs used 50 % of 2 cores"}
    run = _sizes({16: 1.0, 32: 1.5, 64: 2.0, 128: 3.0, 256: 2.0}, busy)
    assert run.answer() is None and "inconclusive: the machine was busy" in run.winner.text


def test_measure_head_sizes_sweeps_then_judges():
    run = heads.measure_head_sizes(128, b=1, s=32, dtype="fp32", device="cpu", min_d=32, max_d=128, rep_ms=2,
                                   warmup_ms=1, progress=False)
    assert (run.h, run.b, run.s) == (128, 1, 32) and list(run.frame["d"]) == [32, 64, 128]
    assert run.winner.text and run.answer() in (None, *heads.ENDS)
