"""MFU/HFU arithmetic, peaks, the measured ceiling, and the published runs in perflab/flops/data.

Published figures (see perflab/flops/data/published_runs.json for each source): PaLM 540B MFU 46.2% /
45.7% without attention (Chowdhery et al. 2022 §4.1, Table 3, App. B); MT-NLG 530B 30.2% / 29.7%
(ibid.); Korthikanti et al. 2022 Table 5 MFU/HFU (22B 41.5/43.7, 175B 51.4/52.8, 530B 56.0/57.0,
1T 56.3/57.0) and §6.3 (54.2% with 8-way data parallelism); Narayanan et al. 2021 §5.1 eq. 4
(34 and 84 days).
"""

import sys
import types

import pytest

from perflab.core.errors import InputError
from perflab.flops.mfu import (
    achieved_tflops,
    comparability,
    implied_recompute_fraction,
    matmul_ceiling,
    mfu,
    printed,
    published_frame,
    published_runs,
    reproduce,
    resolve_peak,
    utilization,
)

ROWS = [(run["id"], r) for run in published_runs() for r in reproduce(run)]


@pytest.mark.parametrize("run_id,rep", ROWS, ids=[f"{i}:{r.quantity}" for i, r in ROWS])
def test_published_figures_reproduce(run_id, rep):
    assert rep.reproduced, (run_id, rep.quantity, rep.published, rep.computed, rep.low, rep.high)
    assert abs(rep.computed - rep.published) <= max(0.002, 0.005 * rep.published)


def test_every_published_figure_is_checked():
    quantities = {(i, r.quantity) for i, r in ROWS}
    assert ("palm-540b", "mfu") in quantities and ("korthikanti-1t", "hfu") in quantities
    assert len(ROWS) == 15
    df = published_frame()
    assert df["reproduced"].dropna().all()


def test_mfu_arithmetic():
    assert achieved_tflops(1000, 6e9) == pytest.approx(6.0)
    assert mfu(1000, 6e9, 12.0) == pytest.approx(0.5)
    assert mfu(8000, 6e9, 12.0, devices=8) == pytest.approx(0.5)
    u = utilization(1000, 6e9, peak_tflops=12, hardware_flops_per_token=8e9)
    assert u.mfu == pytest.approx(0.5) and u.hfu == pytest.approx(2 / 3)
    for bad in (0, -1, float("inf"), "x"):
        with pytest.raises(InputError):
            mfu(bad, 1e9, 100)
    with pytest.raises(InputError):
        mfu(1, 1, 1, devices=0)


def test_peaks():
    assert resolve_peak(accelerator="h100-sxm") == (989.4, pytest.approx(resolve_peak(accelerator="h100-sxm")[1]))
    assert resolve_peak(accelerator="NVIDIA A100-SXM4-80GB")[0] == 312
    assert resolve_peak(275)[0] == 275
    with pytest.raises(InputError, match="unknown accelerator"):
        resolve_peak(accelerator="tpu-v9")
    with pytest.raises(InputError, match="no dense bf16"):
        resolve_peak(accelerator="v100-sxm2-16gb", dtype="bf16")
    with pytest.raises(InputError):
        resolve_peak()


def test_palm_hfu_implies_three_quarters_of_a_forward_recomputed():
    """PaLM's 57.8% HFU is not reproducible from its inputs; what it implies: ≈ 75% of a forward
    recomputed. Full rematerialization of every layer would give ≈ 61.6%, an upper bound."""
    f = implied_recompute_fraction(0.462, 0.578)
    assert 0.74 < f < 0.76
    assert 0.578 < 0.462 * (1 + 1 / 3) < 0.62


def test_printed():
    assert printed(0.46229, 3, "truncate") == 0.462 and printed(0.30266, 3, "truncate") == 0.302
    assert printed(0.41651, 3, "round") == 0.417


def test_ceiling_measured_and_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))  # no MAMF search recorded here by another test
    a = matmul_ceiling("cpu", "fp32", size=256)
    b = matmul_ceiling("cpu", "fp32", size=256)
    assert a is b and a.tflops > 0 and "256³" in a.label and a.source == "matmul"


def test_ceiling_prefers_mamf(monkeypatch):
    fake = types.ModuleType("perflab.gemm.mamf")
    fake.measured_ceiling = lambda dev, dtype: 1.234
    monkeypatch.setitem(sys.modules, "perflab.gemm.mamf", fake)
    import perflab.gemm

    monkeypatch.setattr(perflab.gemm, "mamf", fake, raising=False)
    c = matmul_ceiling("cpu", "fp32", size=256)
    assert c.tflops == 1.234 and c.source == "mamf"
    fake.measured_ceiling = lambda dev, dtype: None  # not measured yet: fall back to a matmul
    assert matmul_ceiling("cpu", "fp32", size=256).source == "matmul"


def test_comparability():
    a = {"name": "PaLM", "flops": "6N + 12LHQT", "recompute": "model", "peak": "275 bf16 dense"}
    b = {"name": "Megatron", "flops": "eq. 7", "recompute": "model", "peak": "312 bf16 dense"}
    df = comparability(a, b)
    v = dict(zip(df.index, df["verdict"]))
    assert v["Model or hardware FLOPs?"] == "same"
    assert v["How were the FLOPs counted?"] == "differs"
    assert v["What does the time include?"] == "unknown"


def test_narayanan_table1_mfu_below_published_hfu():
    """Table 1's TFLOP/s count a full recomputation (eq. 3): model FLOPs (eq. 7) are 3/4 of them up to the
    attention term, so every row's MFU lies below its published fraction of peak (Narayanan et al. 2021, Table 1)."""
    from perflab.flops.mfu import narayanan_table1_mfu

    df = narayanan_table1_mfu()
    assert df.attrs["peak_tflops"] == 312
    assert ((df["MFU (eq. 7, %)"] < df["HFU (published %)"]) & (df["MFU (eq. 7, %)"] > 0.7 * df["HFU (published %)"])).all()
    first = df.iloc[0]  # 1.7B: 137 TFLOP/s is 44% of 312
    assert first["tflops_per_gpu"] / 312 == pytest.approx(first["peak_fraction"], abs=0.005)


def test_handbook_estimate_example():
    """The handbook's perl one-liner (52B, s=2048, GBS=1024, 127 s, 64 GPUs) prints 107.3 TFLOP/s with factor 4
    (S. Bekman, Machine Learning Engineering, 'TFLOPS as a performance metric')."""
    from perflab.flops.mfu import handbook_estimate_example

    ex = handbook_estimate_example()
    assert ex["hfu_tflops"] == pytest.approx(52 * 4 * 2 * 2048 * 1024 / (127 * 64 * 1e3))
    assert round(ex["hfu_tflops"], 1) == 107.3
    assert ex["mfu_tflops"] == pytest.approx(ex["hfu_tflops"] * 3 / 4)
