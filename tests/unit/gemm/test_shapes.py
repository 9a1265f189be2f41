"""Tests of `perflab.gemm.shapes`."""

from __future__ import annotations

import types

import pytest

from perflab.core.errors import InputError
from perflab.course.reference import published
from perflab.gemm import (
    plots,
    shapes,
)


def test_shape_model_refusals():
    with pytest.raises(InputError, match=r"^a predicted time needs a peak TFLOP/s > 0 \(this device's peak is unknown"):
        shapes.predicted_time_s(1024, 1024, 1024, sms=108, peak_tflops=0)
    with pytest.raises(InputError, match="^dimension 'x': use m, n or k$"):
        shapes.staircase("x", [128], {"m": 1, "n": 1, "k": 1}, sms=108)
    with pytest.raises(InputError, match="^give the fixed sizes m, k for a sweep over n$"):
        shapes.staircase("n", [128], {}, sms=108)
    with pytest.raises(InputError, match=r"^full waves are about the output's rows \(m\) or columns \(n\), not k$"):
        shapes.full_wave_sizes("k", {"m": 1024, "n": 1024}, sms=108)
    with pytest.raises(InputError, match="^--m-range needs three whole numbers: START STOP STEP$"):
        shapes.fine_values("a", 1024, 64, name="--m-range")
    with pytest.raises(InputError, match="^range needs three whole numbers"):
        shapes.fine_values(None, 1024, 64)  # type: ignore[arg-type]


def test_sm_counts_and_model_targets_refuse_gpus_without_one():
    with pytest.raises(InputError, match="^NVIDIA H200 SXM 141GB's SM count is not published; pass --sms$"):
        shapes.sm_count_of(gpu="h200-sxm")
    with pytest.raises(InputError, match="^'h999' is not a GPU with a published SM count in perflab's table"):
        shapes.model_target(None, "h999")
    with pytest.raises(InputError, match="^'h200-sxm' is not a GPU with a published SM count"):
        shapes.model_target(None, "h200-sxm")


def test_explain_gemm_says_when_the_gpu_has_no_mode_for_the_dtype():
    t = shapes.model_target(None, "a100-sxm-80gb")
    df = shapes.explain_gemm(1024, 1024, 1024, dtype="fp8", target=t)
    assert df.loc["roofline", "value"] == "NVIDIA A100 SXM 80GB has no dense fp8 mode"
    assert "predicted" not in df.index


def test_a_recorded_gpu_wave_sweep_is_drawn_with_the_tile_that_fits_it():
    """A reference sweep as `perflab reference record` writes it on a GPU (here made from the wave
    model's own times for 256x128 tiles on 132 SMs): the figure names the device and the fitted
    staircase puts its steps where the recorded times step."""
    import matplotlib.pyplot as plt
    import pandas as pd

    fixed, sms = {"m": 2304, "k": 4096}, 132
    ns = list(range(128, 4097, 64))
    times = [shapes.predicted_time_s(fixed["m"], n, fixed["k"], sms=sms, tile=(256, 128), peak_tflops=800) for n in ns]
    frame = pd.DataFrame({"n": ns, "median_s": times,
                          "tflops": [2 * fixed["m"] * n * fixed["k"] / t / 1e12 for n, t in zip(ns, times)]})
    ref = types.SimpleNamespace(frame=frame, params={"dim": "n", "fixed": fixed, "sms": sms},
                                label="NVIDIA H100 80GB HBM3, driver 570", provenance={"device": "NVIDIA H100 80GB HBM3"})
    fig = plots.reference_waves(ref)
    try:
        top, bottom = fig.axes[:2]
        assert top.get_title() == "Reference: NVIDIA H100 80GB HBM3, driver 570"
        assert "measured on NVIDIA H100 80GB HBM3" in [t.get_text() for t in top.get_legend().get_texts()]
        fit = shapes.fit_tile(ns, times, "n", fixed, sms=sms)
        best = fit.table.iloc[0]
        # 256x128 with one block per SM, or 128x128 with two: the same wave size, the same staircase
        assert (best["tile"], int(best["blocks_per_sm"])) == ("256x128", 1) and best["rel_rms"] < 1e-9
        assert len(bottom.get_lines()) >= 2  # the recorded times and at least the best staircase
    finally:
        plt.close(fig)


def test_sm_counts_from_the_spec_table_and_refusals():
    sms, where = shapes.sm_count_of(gpu="h100-sxm")
    assert sms == 132 and where.startswith("NVIDIA H100")
    with pytest.raises(InputError, match="unknown GPU 'h999'"):
        shapes.sm_count_of(gpu="h999")
    assert shapes.sm_count_of() == (None, "no CUDA GPU here")


@pytest.mark.gpu
def test_a_tile_staircase_explains_a_fine_sweep_on_gpu():
    from perflab.core.device import describe

    sms = describe("cuda").details["sm_count"]
    fixed = {"m": 2304, "k": 4096}
    values = shapes.fine_values(128, 4096, 32)
    res = shapes.sweep_dimension("n", values, fixed, "bf16", "cuda", name="t_gpu_waves", progress=False)
    df = res.ok_frame()
    fit = shapes.fit_tile(list(df["n"]), list(df["median_s"]), "n", fixed, sms=sms)
    assert fit.best["steps"] > 0 and fit.best["rel_rms"] < 0.2, fit.table.head()


def test_nvidia_wave_quantization_worked_example():
    """NVIDIA, "Matrix Multiplication Background User's Guide" (DU-09799-001), §3.2 Wave Quantization:
    an A100 has 108 SMs; with 256×128 thread-block tiles one block fits per SM, so a wave is 108 tiles,
    and for M = 2304, K = 4096 with N varying, utilization is highest when the number of tiles is an
    integer multiple of 108 or just below. M = 2304 is 9 tiles of 256, so N = 12 tiles of 128 = 1536
    fills exactly one wave, one more column of tiles starts a nearly empty second wave, and 3072 fills
    two. The record in perflab/gemm/data/published_shapes.json holds the guide's numbers."""
    ex = published("nvidia_wave_example")
    assert (ex["m"], ex["k"], ex["sms"], tuple(ex["tile"])) == (2304, 4096, 108, (256, 128))
    from perflab.core.hardware import by_id

    assert by_id(ex["gpu"]).sm_count == ex["sms"]  # the table agrees with the guide on the A100
    m, k, sms, tile = ex["m"], ex["k"], ex["sms"], tuple(ex["tile"])

    full = shapes.wave_model(m, 1536, k, sms=sms, tile=tile)
    assert (full.tiles_m, full.tiles_n, full.tiles, full.wave_size, full.waves) == (9, 12, 108, 108, 1)
    assert full.utilization == pytest.approx(1.0)

    tail = shapes.wave_model(m, 1537, k, sms=sms, tile=tile)  # one more column of tiles: 117 tiles
    assert (tail.tiles, tail.waves, tail.last_wave_tiles) == (117, 2, 9)
    assert tail.wave_utilization == pytest.approx(117 / 216)
    assert tail.utilization < 0.55  # throughput roughly halves at the cliff

    just_below = shapes.wave_model(m, 1408, k, sms=sms, tile=tile)  # 99 tiles: "just below" a multiple of 108
    assert just_below.waves == 1 and just_below.utilization == pytest.approx(99 / 108)

    # the cliffs: the first N of each new wave, and the N that fill whole waves
    assert shapes.cliffs("n", range(128, 4609), {"m": m, "k": k}, sms=sms, tile=tile) == [1537, 3073]
    assert shapes.full_wave_sizes("n", {"m": m, "k": k}, sms=sms, tile=tile, limit=4608) == [1536, 3072, 4608]
    # the tile count is a multiple of 108 exactly at those full-wave sizes
    for n in (1536, 3072, 4608):
        assert shapes.wave_model(m, n, k, sms=sms, tile=tile).tiles % 108 == 0


def test_tile_quantization():
    # a ragged edge costs a whole tile: 257 rows need 3 tiles of 128
    w = shapes.wave_model(257, 256, 64, sms=108, tile=(128, 128))
    assert w.tiles == 6 and w.tile_utilization == pytest.approx(257 * 256 / (6 * 128 * 128))
    assert shapes.tile_count(256, 256, 128, 128) == 4


def test_what_if_more_sms():
    # 132 SMs (H100 SXM) with 4 more: the same GEMM needs fewer waves or the same
    base = shapes.wave_model(8192, 8192, 8192, sms=132, tile=(128, 256))
    more = shapes.wave_model(8192, 8192, 8192, sms=136, tile=(128, 256))
    assert more.waves <= base.waves and more.tiles == base.tiles


def test_fit_tile_recovers_the_tile_that_made_the_staircase():
    fixed = {"m": 2304, "k": 4096}
    values = list(range(128, 6145, 64))
    for tile in ((256, 128), (128, 128), (64, 256)):
        times = [shapes.predicted_time_s(2304, n, 4096, sms=108, tile=tile, peak_tflops=312) * 1.07 + 3e-6
                 for n in values]
        fit = shapes.fit_tile(values, times, "n", fixed, sms=108, blocks_per_sm=(1,))
        assert fit.best["rel_rms"] < 1e-9
        # 256×128 and 128×128 place their steps differently; a tile with the same steps explains it equally
        best_steps = shapes.cliffs("n", values, fixed, sms=108, tile=fit.best_tile)
        assert best_steps == shapes.cliffs("n", values, fixed, sms=108, tile=tile)
        assert fit.best["sec_per_wave"] > 0


def test_tensor_core_alignment_per_dtype_and_arch():
    """The guide (§2.2) and Anthony et al. (arXiv:2401.14489): multiples of 16 bytes on V100 and of 128
    bytes on A100 — for fp16 (2 bytes) 8 and 64 elements; "for fp16 a multiple of 8, on A100 64"."""
    v100 = shapes.tensor_core_alignment("fp16", "v100-sxm2-16gb")
    a100 = shapes.tensor_core_alignment("fp16", "a100-sxm-80gb")
    assert (v100.required, v100.recommended) == (8, 8)
    assert (a100.required, a100.recommended) == (8, 64)
    assert shapes.tensor_core_alignment("bf16", "8.0").recommended == 64
    assert shapes.tensor_core_alignment("tf32", "ampere").recommended == 32  # 128 bytes of 4-byte elements
    assert shapes.tensor_core_alignment("fp8", "hopper").required == 16  # 16 bytes of 1-byte elements
    assert "assume" in shapes.tensor_core_alignment("bf16", "h100-sxm").note  # an extrapolation says so
    assert shapes.tensor_core_alignment("bf16", "volta").recommended is None  # V100 has no bf16
    assert shapes.tensor_core_alignment("fp32", "a100-sxm-80gb").recommended is None  # CUDA cores
    assert shapes.tensor_core_alignment("bf16", "cpu").recommended is None


def test_roofline_bound():
    from perflab.core.hardware import by_id

    a100 = by_id("a100-sxm-80gb")
    big = shapes.roofline_bound(8192, 8192, 8192, "bf16", a100)
    assert big.bound == "compute-bound" and big.attainable_tflops == pytest.approx(312.0)
    skinny = shapes.roofline_bound(8192, 8192, 16, "bf16", a100)
    assert skinny.bound == "memory-bound"
    assert skinny.attainable_tflops == pytest.approx(skinny.arithmetic_intensity * 2039e9 / 1e12)
    assert skinny.ridge == pytest.approx(312e12 / 2039e9)
    assert set(skinny.to_json()) == {"dtype", "itemsize", "arithmetic_intensity", "peak_tflops", "bandwidth_gbps",
                                     "ridge", "bound", "attainable_tflops"}  # `perflab waves --json`'s keys
    none = shapes.roofline_bound(64, 64, 64, "bf16", by_id("v100-sxm2-16gb"))  # Volta has no bf16 mode
    assert none.peak_tflops is None and none.bound is None and none.ridge is None


def test_every_name_the_lessons_call_is_still_a_name_of_shapes():
    from perflab.gemm import alignment, sizing, tilefit, waves

    for mod in (waves, alignment, sizing, tilefit):
        public = [n for n in vars(mod) if not n.startswith("_") and getattr(vars(mod)[n], "__module__", None) == mod.__name__]
        assert public and all(getattr(shapes, n) is getattr(mod, n) for n in public), mod.__name__


def test_sweep_dimension_smoke_on_cpu():
    res = shapes.sweep_dimension("n", [16, 24, 32], {"m": 32, "k": 32}, "fp32", "cpu", name="t_sweep", rep_ms=2,
                                 warmup_ms=1, progress=False)
    df = res.ok_frame()
    assert list(df["n"]) == [16, 24, 32] and (df["tflops"] > 0).all()


def _sweep(values, times, quietness=None, fixed=(2304, 4096)):
    """A measured sweep along n as `sweep_dimension` returns it (rows with params and metrics)."""
    from pathlib import Path

    from perflab.core.results import SweepResult

    m, k = fixed
    rows = [{"params": {"m": m, "n": n, "k": k, "dtype": "bf16"}, "status": "ok", "median_s": t,
             "tflops": 2 * m * n * k / t / 1e12, "quietness": quietness} for n, t in zip(values, times, strict=True)]
    return SweepResult(Path("sweep.jsonl"), rows)


def test_a_sweep_is_fitted_with_a_gpus_sms_or_a_cpus_threads():
    fixed = {"m": 2304, "k": 4096}
    values = list(range(128, 6145, 64))
    times = [shapes.predicted_time_s(2304, n, 4096, sms=108, tile=(256, 128), peak_tflops=312) for n in values]
    target = shapes.model_target(None, "a100-sxm-80gb")
    gpu = types.SimpleNamespace(kind="cuda", details={"sm_count": 108})
    fit = shapes.fit_sweep(_sweep(values, times), "n", fixed, gpu, target)
    assert (fit.unit, fit.sms, fit.best_tile) == ("SM", 108, (256, 128)) and fit.values == tuple(values)
    assert fit.times_s == tuple(times) and len(fit.tflops) == len(values) and fit.fixed == fixed
    assert list(fit.frame().columns)[0] == "tile × blocks per SM"
    assert fit.quietness.verdict == "unknown" and fit.verdict().startswith("best fit: 256x128 blocks, 1 per SM on 108 SMs")
    busy = {"verdict": "disturbed", "share": 0.9, "wall_s": 1.0, "cores": 2, "cause": "other programs used 90 % of 2 cores"}
    noisy = shapes.fit_sweep(_sweep(values, times, busy), "n", fixed, gpu, target)
    assert noisy.verdict() == ("inconclusive: the machine was busy (other programs used 90 % of 2 cores (in 95 of 95 "
                               "measurements)): the fit below ranks noise, not tiles")
    cpu = types.SimpleNamespace(kind="cpu", details={"torch_threads": 2})
    on_cpu = shapes.fit_sweep(_sweep(values, times), "n", fixed, cpu, target)
    assert (on_cpu.unit, on_cpu.sms) == ("thread", 2) and set(on_cpu.table["tile"]) == {
        f"{a}x{b}" for a, b in shapes.CPU_BLOCKS}
    assert list(on_cpu.frame().columns)[0] == "tile × blocks per thread"


def test_a_sweeps_quietness_is_its_points_together():
    quiet = {"verdict": "quiet", "share": 0.0, "wall_s": 1.0, "cores": 2}
    busy = {"verdict": "disturbed", "share": 0.5, "wall_s": 1.0, "cores": 2, "cause": "other programs used 50 % of 2 cores"}
    assert shapes.sweep_quietness(_sweep([128, 256], [1e-3, 2e-3], quiet)).quiet
    q = shapes.sweep_quietness(_sweep([128, 256], [1e-3, 2e-3], busy))
    assert q.disturbed and "other programs used 50 % of 2 cores" in q.line()
    assert shapes.sweep_quietness(_sweep([128], [1e-3], None)).verdict == "unknown"


def test_the_lesson_measures_bf16_on_a_gpu_and_fp32_elsewhere():
    import torch

    assert shapes.sweep_dtype(torch.device("cuda", 0)) == "bf16" and shapes.sweep_dtype("cuda:1") == "bf16"
    assert shapes.sweep_dtype(torch.device("cpu")) == "fp32" and shapes.sweep_dtype("mps") == "fp32"
    assert shapes.sweep_dtype(None) == "fp32"


def test_the_what_if_table_puts_the_chip_as_built_beside_four_more_sms():
    target = shapes.model_target(None, "a100-sxm-80gb")
    assert target.choice == "a100-sxm-80gb" and target.choice in shapes.gpu_choices(None)
    t = shapes.explain_what_if(2304, 1664, 4096, dtype="bf16", target=target, extra_sms=4)
    assert list(t.columns) == ["as built", "4 more SMs"]
    assert list(t.index) == ["SMs (wave size)", "waves", "utilization", "predicted"]
    # in the guide's example 4 more SMs buy nothing: the extra column adds 9 tiles at once, more than 4 new slots
    assert t.loc["waves", "as built"].startswith("2 ") and t.loc["waves", "4 more SMs"].startswith("2 ")
    assert t.loc["predicted", "as built"].split(" TFLOP/s")[0] == t.loc["predicted", "4 more SMs"].split(" TFLOP/s")[0]
    here = shapes.model_target(types.SimpleNamespace(kind="cuda", name="NVIDIA H100 80GB HBM3", details={"sm_count": 132}))
    assert here.choice == shapes.THIS_GPU
