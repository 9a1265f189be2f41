"""Tests of `perflab.gemm.mamf`."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from perflab.core.device import DeviceInfo, describe
from perflab.core.dtypes import parse_dtype
from perflab.core.errors import InputError, UnsupportedError
from perflab.course import report as R
from perflab.gemm import (
    mamf,
    shapes,
)

CPU = torch.device("cpu")


def _ctx(quick: bool, info=None) -> R.Ctx:
    return R.Ctx(CPU, info if info is not None else DeviceInfo("cpu", "test cpu"), quick)


# ----------------------------------------------------------------------------- report: mamf
def _landscape(p):
    """A smooth made-up TFLOP/s landscape with one top at m = n = 1024, k = 1536."""
    t = 1.0 - ((p["m"] - 1024) ** 2 + (p["n"] - 1024) ** 2 + (p["k"] - 1536) ** 2) / 2**24
    return {"mean_tflops": t, "median_tflops": t, "max_tflops": t * 1.01, "quietness": QUIET}


QUIET = {"verdict": "quiet", "share": 0.01, "cause": "machine quiet"}
BUSY = {"verdict": "disturbed", "share": 0.5, "cause": "other programs used 50 % of 2 cores"}


def _gpu_like(sms, tile, peak=989.0, bw=3350.0):
    """A landscape with a GPU's cliffs: the tile/wave model on a roofline, times a smooth preference."""

    def f(p):
        t = shapes.predicted_time_s(p["m"], p["n"], p["k"], sms=sms, tile=tile, peak_tflops=peak, bandwidth_gbps=bw)
        v = 2 * p["m"] * p["n"] * p["k"] / t / 1e12
        v *= 1 - 0.05 * abs(math.log2(p["k"] / 4096)) - 0.02 * abs(math.log2(p["m"] * p["n"] / 2**25))
        return {"mean_tflops": v, "median_tflops": v, "max_tflops": v}

    return f


def _cli_search(strategy: str, results, rng=("32", "256", "32")):
    import json

    args = [sys.executable, "-m", "perflab", "mamf", "--search", strategy, "--dtype", "fp32", "--device", "cpu",
            "--rep-ms", "4", "--warmup-ms", "1", "--json"]
    for ax in ("m", "n", "k"):
        args += [f"--{ax}-range", *rng]
    r = subprocess.run(args, capture_output=True, text=True, timeout=600, env={**os.environ, "PERFLAB_RESULTS": str(results)})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_mamf_fp8_operands_go_through_the_shared_fp8_path():
    fp8 = parse_dtype("fp8")
    # make_matmul builds fp8 operands; a CPU has no fp8 matmul, and says so
    with pytest.raises(UnsupportedError, match="^fp8 matmuls need an NVIDIA GPU of compute capability 8.9"):
        mamf._operands(16, 16, 16, fp8, torch.device("cpu"))
    # the fp8 check compares _scaled_mm's bf16 product with float64 (torch runs _scaled_mm on a CPU too)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(32, 16, generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(16, 16, generator=g).to(torch.float8_e4m3fn).t().contiguous().t()
    one = torch.ones(())

    def fn():
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    assert 0 < mamf._check(fn, a, b, fp8) < 1e-2
    with pytest.raises(Exception, match="fp8 matmul"):  # a product that is wrong is caught
        mamf._check(lambda: 2 * fn(), a, b, fp8)


def test_mamf_search_and_ceiling_refusals():
    with pytest.raises(InputError, match="^every range needs at least one size$"):
        mamf.search([], [64], [64], measure=lambda p: {})
    empty = mamf.MamfResult(best=None, dtype="bf16", stat="mean", strategy="refine", grid_points=0, evaluated=0,
                            measured=0, elapsed_s=0.0, interrupted=True, path=Path("unused.jsonl"))
    with pytest.raises(ValueError, match="^save_ceiling_record needs a search that measured at least one point$"):
        mamf.save_ceiling_record(empty, None, [[64], [64], [64]])


def test_mamf_default_ranges():
    gpu = mamf.default_ranges(on_gpu=True)
    assert gpu["m"] == list(range(1024, 16385, 1024)) and gpu["n"] == gpu["k"] == gpu["m"]
    assert gpu["n"] is not gpu["m"]
    cpu = mamf.default_ranges(on_gpu=False)
    assert cpu["k"] == [256, 512, 768, 1024, 1280, 1536, 1792, 2048]
    assert mamf.default_ranges(on_gpu=True, smoke=True)["m"] == [64, 128, 192, 256]


def test_the_mamf_part_fails_when_no_shape_can_be_measured(monkeypatch, tmp_path):
    from perflab.gemm import mamf

    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    real = mamf.search

    def broken(p):
        raise RuntimeError("no kernel for this shape")

    monkeypatch.setattr(mamf, "search", lambda *a, **kw: real(*a, measure=broken, **kw))
    with pytest.raises(RuntimeError, match=r"^no shape could be measured \(8 tried\)$"):
        R.part_mamf(_ctx(quick=True, info=describe(CPU)))


def test_the_full_mamf_part_searches_the_default_ranges_and_shows_the_stored_ceiling(monkeypatch, tmp_path):
    from perflab.gemm import mamf

    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    real = mamf.search
    calls = []

    def search(m, n, k, **kw):  # the real search, on a made-up landscape instead of timed matmuls
        calls.append(kw)
        assert m == n == k == list(range(256, 2049, 256))  # a CPU's full default ranges, every size
        # a hundredth of the made-up landscape: 10 GFLOP/s at the top, under any CPU's estimated peak,
        # so the full search may store it (a ceiling above the peak is questioned, not stored)
        return real(m, n, k, measure=lambda p: {key: v / 100 if key.endswith("tflops") else v
                                                for key, v in _landscape(p).items()}, **kw)

    monkeypatch.setattr(mamf, "search", search)
    info = describe(CPU)
    assert mamf.measured_ceiling(info, "fp32") is None
    out = R.part_mamf(_ctx(quick=False, info=info))
    (kw,) = calls
    assert kw["save_ceiling"] is True and kw["name"] == "report_mamf_fp32"
    assert (kw["rep_ms"], kw["warmup_ms"]) == (60, 20)
    data = out.data
    assert {ax: data["best"][ax] for ax in "mnk"} == {"m": 1024, "n": 1024, "k": 1536}
    assert data["ranges"] == {ax: [256, 2048, 8] for ax in "mnk"} and data["grid_points"] == 512
    # the full search saved its ceiling for this device, and the report shows it as a figure
    assert data["stored_ceiling"] == pytest.approx(0.01) == mamf.measured_ceiling(info, "fp32")
    stored = next(f for f in out.figures if f.key == "mamf.fp32.stored")
    assert stored.label == "measured ceiling fp32 (perflab mamf, stored)" and stored.value == pytest.approx(0.01)
    assert out.notes == []
    assert out.summary.startswith("MAMF fp32 0.01 TFLOP/s at 1024×1024×1536"), out.summary


@pytest.mark.gpu
def test_mamf_bf16_never_exceeds_the_spec_peak(tmp_path):
    from perflab.core.device import describe
    from perflab.core.hardware import peaks_for

    vals = mamf.parse_range(2048, 8192, 2048)
    r = mamf.search(vals, vals, vals, dtype="bf16", device="cuda", path=tmp_path / "m.jsonl", progress=False)
    peak = peaks_for(describe("cuda")).get("bf16")
    assert r.best["tflops"] > 0
    if peak:  # never above the datasheet; how far below depends on who else uses the GPU
        assert r.best["tflops"] / peak < 1.05, (r.best, peak)


def test_parse_range():
    assert mamf.parse_range(0, 1024, 256) == [256, 512, 768, 1024]  # mamf-finder users start at 0
    assert mamf.parse_range(100, 100, 7) == [100]
    for bad in ((0, 10, 0), (10, 5, 1), (0, 0, 4)):
        with pytest.raises(InputError):
            mamf.parse_range(*bad)


@pytest.mark.parametrize("sms,tile", [(108, (256, 128)), (132, (128, 256)), (132, (128, 128)), (80, (256, 128)),
                                      (114, (64, 256))])
def test_refine_reaches_the_grid_optimum_of_a_jagged_landscape(tmp_path, sms, tile):
    vals = mamf.parse_range(512, 6144, 512)  # 12 values per axis: 1728 shapes
    f = _gpu_like(sms, tile)
    brute = max(f({"m": m, "n": n, "k": k})["mean_tflops"] for m, n, k in itertools.product(vals, vals, vals))
    r = mamf.search(vals, vals, vals, measure=f, path=tmp_path / "s.jsonl", progress=False, device="cpu")
    assert r.best["tflops"] == pytest.approx(brute, rel=1e-12)
    assert r.fraction < 0.25, r.fraction


def test_grid_strategy_measures_every_shape(tmp_path):
    vals = [256, 512, 768, 1024, 1280]
    f = _gpu_like(108, (256, 128))
    brute = max(f({"m": m, "n": n, "k": k})["mean_tflops"] for m, n, k in itertools.product(vals, vals, vals))
    g = mamf.search(vals, vals, vals, measure=f, strategy="grid", path=tmp_path / "g.jsonl", progress=False,
                    device="cpu")
    assert g.evaluated == g.grid_points == 125 and g.best["tflops"] == pytest.approx(brute)


def test_search_resumes_without_measuring_again(tmp_path):
    vals = [32, 64, 96, 128, 160, 192, 224, 256]
    f = _gpu_like(4, (32, 32), peak=1.0, bw=100.0)
    calls = {"n": 0}

    def flaky(p):
        calls["n"] += 1
        if calls["n"] == 40:
            raise KeyboardInterrupt  # the learner presses stop mid-search
        return f(p)

    path = tmp_path / "s.jsonl"
    first = mamf.search(vals, vals, vals, measure=flaky, path=path, progress=False, device="cpu")
    assert first.interrupted and first.evaluated == 39
    calls["n"] = 1000
    again = mamf.search(vals, vals, vals, measure=flaky, path=path, progress=False, device="cpu")
    assert not again.interrupted
    full = mamf.search(vals, vals, vals, measure=f, path=tmp_path / "fresh.jsonl", progress=False, device="cpu")
    assert again.best == full.best and again.evaluated == full.evaluated
    assert again.measured == full.measured - 39  # nothing measured twice
    assert calls["n"] - 1000 == again.measured + 2  # and the best, measured twice more before it is named


def test_failed_points_are_recorded_and_skipped(tmp_path):
    vals = [16, 32, 48, 64]

    def sometimes_oom(p):
        if p["m"] == 64 and p["n"] == 64:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        v = p["m"] * p["n"] * p["k"] / 1e5
        return {"mean_tflops": v, "median_tflops": v, "max_tflops": v}

    r = mamf.search(vals, vals, vals, measure=sometimes_oom, strategy="grid", path=tmp_path / "s.jsonl",
                    progress=False, device="cpu")
    assert r.best["m"] * r.best["n"] < 64 * 64
    statuses = {row["status"] for row in r.rows}
    assert statuses == {"ok", "oom"}


@pytest.mark.slow
def test_perflab_mamf_grid_and_refine_run_end_to_end_on_real_matmuls(tmp_path):
    """`perflab mamf` on real fp32 CPU matmuls at small sizes: the grid measures all 512 shapes, the
    refined search a subset of the same grid, and each names a best shape inside the ranges. That
    refine reaches the grid's best in a fraction of the points is a property of the search, tested
    above on made-up landscapes: on real timings a busy neighbour decides which point wins."""
    grid = _cli_search("grid", tmp_path / "grid")
    ref = _cli_search("refine", tmp_path / "refine")
    assert grid["evaluated"] == grid["grid_points"] == 512 and ref["grid_points"] == 512
    assert 0 < ref["evaluated"] <= 512
    for d in (grid, ref):
        assert d["best"]["tflops"] > 0 and all(d["best"][ax] in range(32, 257, 32) for ax in "mnk"), d["best"]


def test_measured_ceiling_is_kept_per_device(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    assert mamf.measured_ceiling("cpu", "fp32") is None
    small = {k: v / 1000 for k, v in _landscape({"m": 64, "n": 64, "k": 64}).items() if k != "quietness"}

    def measure(p):
        return {**{k: v * p["m"] * p["n"] * p["k"] / 64**3 for k, v in small.items()}, "quietness": QUIET}

    r = mamf.search([32, 64], [32, 64], [32, 64], dtype="fp32", device="cpu", measure=measure, progress=False)
    assert r.ceiling_path is not None and r.ceiling_path.parent.parent.parent == tmp_path
    assert mamf.measured_ceiling("cpu", "fp32") == pytest.approx(r.best["tflops"])
    rec = mamf.ceiling_record("cpu", "fp32")
    assert rec is not None and rec.kind == "search" and rec.version == 1
    assert rec.shape == (r.best["m"], r.best["n"], r.best["k"]) and rec.dtype == "fp32" and rec.torch
    assert rec.statistic == "mean" and rec.date and rec.confirmed and rec.details["max"] == r.best["max"]
    assert (rec.quietness.verdict, rec.quietness.share, rec.quietness.cause) == ("quiet", 0.01, "machine quiet")
    assert r.ceiling_path.name == "ceilings.json"  # the one store (perflab.core.ceiling), beside the MFU's basis
    note = mamf.ceiling_note("cpu", "fp32")
    assert note.startswith(f"measured ceiling stored for this device: {rec.tflops:.4g} TFLOP/s (mean) at ")
    assert note.endswith("; machine quiet)")
    assert mamf.measured_ceiling("cpu", "bf16") is None  # per dtype
    assert "stored as this device's measured ceiling" in (r.stored_note() or "")


def _search(measure, **kw):
    return mamf.search([32, 64], [32, 64], [32, 64], dtype="fp32", device="cpu", measure=measure, progress=False, **kw)


def _tiny(p, q=QUIET):
    v = p["m"] * p["n"] * p["k"] / 1e9  # at most 0.26 GFLOP/s: under any CPU's estimated peak
    return {"mean_tflops": v, "median_tflops": v, "max_tflops": v, "spread": 0.01, "quietness": q}


def test_a_spike_is_measured_again_and_does_not_become_the_ceiling(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    seen: dict[tuple, int] = {}

    def measure(p):
        key = (p["m"], p["n"], p["k"])
        seen[key] = seen.get(key, 0) + 1
        out = _tiny(p)
        if key == (32, 64, 32) and seen[key] == 1:  # one quiet-moment spike, 40x its real figure
            out = {k: (v * 40 if k.endswith("tflops") else v) for k, v in out.items()}
        return out

    r = _search(measure)
    assert seen[(32, 64, 32)] == 3 and (r.best["m"], r.best["n"], r.best["k"]) == (64, 64, 64)
    assert r.best["confirmed"] and r.best["measurements"] == 3
    assert mamf.measured_ceiling("cpu", "fp32") == pytest.approx(_tiny({"m": 64, "n": 64, "k": 64})["mean_tflops"])


def test_a_ceiling_measured_on_a_busy_machine_is_not_stored_and_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    r = _search(lambda p: _tiny(p, BUSY))
    assert r.best["disturbed"] and mamf.measured_ceiling("cpu", "fp32") is None
    assert "measured while the machine was busy (other programs used 50 %" in (r.stored_note() or "")
    assert "was not stored: measured while the machine was busy" in mamf.ceiling_note("cpu", "fp32")
    nothing = _search(lambda p: {**_tiny(p), "quietness": None}, name="t_unknown")
    assert nothing.best is not None and mamf.measured_ceiling("cpu", "fp32") is None


def test_a_stored_ceiling_is_never_replaced_by_a_less_quiet_one(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    _search(lambda p: _tiny(p, {**QUIET, "share": 0.0}))
    first = mamf.measured_ceiling("cpu", "fp32")
    louder = _search(lambda p: {**_tiny(p, {**QUIET, "share": 0.05}), "mean_tflops": 2 * _tiny(p)["mean_tflops"]},
                     name="t_louder")
    assert mamf.measured_ceiling("cpu", "fp32") == first and "quieter machine" in (louder.stored_note() or "")
    rec = mamf.ceiling_record("cpu", "fp32")
    assert rec is not None and rec.quietness.share == 0.0


def test_saved_shapes_say_when_they_were_measured(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    first = _search(_tiny)
    assert first.saved is None and first.saved_note() == ""
    again = _search(_tiny)
    assert again.measured == 0 and again.saved_note().startswith(f"{first.evaluated} of {first.evaluated} measurements "
                                                                 "served from results saved 20")
    assert f"machine {first.evaluated} quiet" in again.saved_note()


def test_measure_point_checks_and_reports_three_statistics():
    p = mamf.measure_point(64, 48, 32, "fp32", "cpu", rep_ms=3, warmup_ms=1)
    assert p["max_tflops"] >= p["median_tflops"] > 0 and p["mean_tflops"] > 0
    assert p["rel_error"] < 1e-5 and p["flushed_l2"] is False


def test_bad_inputs():
    with pytest.raises(InputError):
        mamf.search([1], [1], [1], strategy="random", device="cpu")
    with pytest.raises(InputError):
        mamf.search([1], [1], [1], stat="mode", device="cpu")
    with pytest.raises(InputError, match="GiB"):
        mamf.search([10**6], [10**6], [10**6], dtype="fp32", device="cpu")


def test_a_mamf_search_above_the_peak_is_kept_as_questioned_not_stored(monkeypatch, tmp_path):
    from perflab.core.hardware import Peaks

    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    tiny_peak = Peaks("cpu", {"fp32": 1e-9}, "estimate")  # every real search is above this peak
    r = mamf.search([32, 64], [32, 64], [32, 64], dtype="fp32", device="cpu", rep_ms=2, warmup_ms=1, progress=False,
                    peaks=tiny_peak)
    assert mamf.measured_ceiling("cpu", "fp32") is None and "estimated peak" in (r.stored_note() or "")
    note = mamf.ceiling_note("cpu", "fp32")
    assert note.startswith("no measured ceiling stored") and "was not stored" in note and "estimated peak" in note


def test_a_search_in_words_names_its_best_its_quietness_and_the_peaks(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    r = _search(_tiny)
    pub = {"accelerator": "NVIDIA H100 SXM", "tflops": 794.5, "source": "Bekman's table"}
    text = r.text(1.0, "estimate", pub, "cpu")
    first = text.splitlines()[0]
    assert first.startswith(f"MAMF fp32 on {r.device_name}: {r.best['tflops']:.4g} TFLOP/s (mean) at 64×64×64 (machine quiet)")
    assert f"{r.evaluated} of {r.grid_points} shapes looked at" in first
    assert f"  peak: 1 TFLOP/s (estimate) → {r.best['tflops']:.0%} of it" in text
    assert "  published MAMF for NVIDIA H100 SXM: 794.5 TFLOP/s (Bekman's table)" in text
    assert "stored as this device's measured ceiling" in text
    bare = r.text()
    assert "  peak unknown" in bare and "no published MAMF for this device" in bare
    busy = _search(lambda p: _tiny(p, BUSY), name="busy")
    assert "(disturbed: other programs used 50 % of 2 cores)" in busy.text(1.0, "estimate")


def test_the_published_and_recorded_mamf_tables_read_as_a_person_reads_them():
    import types

    from perflab.course.reference import published

    t = mamf.published_table(published("mamf"))
    assert list(t.columns) == ["accelerator", "dtype", "MAMF TFLOP/s", "spec TFLOP/s", "share of spec", "best shape",
                               "torch"]
    h100 = t[(t["accelerator"] == "NVIDIA H100 SXM") & (t["dtype"] == "bf16")].iloc[0]
    assert (h100["MAMF TFLOP/s"], h100["spec TFLOP/s"], h100["share of spec"]) == ("794", "989", "80%")
    ref = types.SimpleNamespace(provenance={"device": "NVIDIA H200"}, label="recorded 2026-11-27",
                                summary={"best": {"tflops": 801.23, "m": 4096, "n": 8192, "k": 4096},
                                         "peak_tflops": 989.4, "published": None})
    row = mamf.reference_table([ref]).iloc[0]
    assert (row["MAMF TFLOP/s"], row["best shape"], row["published TFLOP/s"]) == ("801", "4096×8192×4096", "–")
