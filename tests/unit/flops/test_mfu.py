"""Tests of `perflab.flops.mfu`."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from perflab.core import ceiling, hardware
from perflab.core.errors import InputError
from perflab.flops import mfu
from perflab.flops.mfu import (
    achieved_tflops,
    comparability,
    implied_recompute_fraction,
    narayanan_table1,
    printed,
    published_frame,
    published_runs,
    reproduce,
    resolve_peak,
    run_utilization,
    utilization,
)
from perflab.flops.transformer import (
    palm_flops_per_token,
)

from .helpers import estimated, timed_matmul, watch_of

ROWS = [(run["id"], r) for run in published_runs() for r in reproduce(run)]


def test_published_runs_refuse_a_missing_peak_and_an_unknown_convention():
    with pytest.raises(ValueError, match="^published_runs.json: no bf16 peak for v100-sxm2-16gb in the spec table$"):
        mfu._spec_peak("v100-sxm2-16gb", "bf16")
    with pytest.raises(ValueError, match="^unknown convention 'chinchilla'$"):
        mfu._compute({"inputs": {}, "convention": "chinchilla"}, "mfu")


def test_published_run_lookups_name_the_known_runs():
    ids = [r["id"] for r in mfu.published_runs()]
    with pytest.raises(InputError, match=f"unknown run 'gpt-5': use one of {ids[0]}"):
        mfu.run_description("gpt-5")
    described = [r for r in mfu.published_runs() if "describe" in r]
    assert described and mfu.run_description(described[0]["id"]) == described[0]["describe"]
    bare = [r["id"] for r in mfu.published_runs() if "describe" not in r]
    for rid in bare:
        with pytest.raises(InputError, match="no checklist description"):
            mfu.run_description(rid)


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
    assert mfu.mfu(1000, 6e9, 12.0) == pytest.approx(0.5)
    assert mfu.mfu(8000, 6e9, 12.0, devices=8) == pytest.approx(0.5)
    u = run_utilization(1000, 6e9, peak_tflops=12, hardware_flops_per_token=8e9)
    assert u.mfu == pytest.approx(0.5) and u.hfu == pytest.approx(2 / 3)
    over = run_utilization(1000, 6e9, peak_tflops=1)  # 6 TFLOP/s on a 1 TFLOP/s peak
    assert over.mfu is None and "suspect" in (over.suspect or "")
    for bad in (0, -1, float("inf"), "x"):
        with pytest.raises(InputError):
            mfu.mfu(bad, 1e9, 100)
    with pytest.raises(InputError):
        mfu.mfu(1, 1, 1, devices=0)


def test_a_run_above_100_percent_of_its_peak_has_no_mfu_and_says_why():
    """`mfu` divides where every MFU is divided (`utilization`): 6 TFLOP/s against a 1 TFLOP/s peak is not 600 %."""
    with pytest.raises(InputError, match="no utilization above 100 %: the step ran at .* the ceiling is suspect"):
        mfu.mfu(1000, 6e9, 1.0)
    assert mfu.mfu(1000, 6e9, 6.0) == pytest.approx(1.0)  # exactly the peak is not above it


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
    assert ex.hfu_tflops == pytest.approx(52 * 4 * 2 * 2048 * 1024 / (127 * 64 * 1e3))
    assert round(ex.hfu_tflops, 1) == 107.3
    assert ex.mfu_tflops == pytest.approx(ex.hfu_tflops * 3 / 4)
    assert ex.peak_tflops == 312 and ex.hfu == pytest.approx(ex.hfu_tflops / 312) and ex.mfu == pytest.approx(ex.mfu_tflops / 312)


@pytest.mark.parametrize("row", narayanan_table1(), ids=lambda r: f"{r['params_b']}B")
def test_narayanan_table1_peak_is_dense_bf16(row):
    """Narayanan et al. 2021 Table 1: 'percentage of theoretical peak' = TFLOP/s per GPU / 312 (the
    A100's dense bf16 peak, as perflab's table has it), and aggregate = per GPU × GPUs."""
    from perflab.core.hardware import by_id

    peak = by_id("a100-sxm-80gb").peak("bf16")
    assert peak == 312
    assert round(row["tflops_per_gpu"] / peak, 2) == row["peak_fraction"]
    # the per-GPU column is printed as a whole number: aggregate / GPUs rounds to it
    assert abs(row["aggregate_pflops"] * 1e3 / row["gpus"] - row["tflops_per_gpu"]) <= 0.5


@pytest.mark.parametrize("tps,n,L,H,Q,devices,peak,pub,pub_no_attn", [
    (238.3e3, 540.35e9, 118, 48, 256, 6144, 275, 0.462, 0.457),
    (65.43e3, 530e9, 105, 128, 160, 2240, 312, 0.302, 0.297),
])
def test_palm_mfu(tps, n, L, H, Q, devices, peak, pub, pub_no_attn):
    """PaLM §4.1 / Table 3 and Appendix B: PaLM 540B 238.3K tokens/s on 6144 TPU v4 (275 TFLOP/s)
    → 45.7% without / 46.2% with self-attention; MT-NLG 530B 65.43K tokens/s on 2240 A100 → 29.7% / 30.2%.
    The paper truncates to one decimal (46.23% → 46.2%, 30.27% → 30.2%)."""
    with_attn = mfu.mfu(tps, palm_flops_per_token(n, L, H, Q, 2048), peak, devices)
    without = mfu.mfu(tps, 6 * n, peak, devices)
    assert printed(with_attn, 3, "truncate") == pub
    assert printed(without, 3, "truncate") == pub_no_attn


CPU = torch.device("cpu")


@pytest.fixture
def timed(monkeypatch, tmp_path):
    return timed_matmul(monkeypatch, tmp_path)


def test_a_ceiling_above_the_peak_is_questioned():
    assert hardware.ceiling_problem(0.1, "fp32", estimated(0.2)) is None
    why = hardware.ceiling_problem(0.1698, "fp32", estimated(0.1558))
    assert why and "109 % of the estimated peak" in why and "not stored" in why
    assert hardware.ceiling_problem(5.0, "bf16", estimated(0.2)) is None  # no bf16 peak: nothing to check against
    # the one admission rule (perflab.core.ceiling) asks it first
    from perflab.core.quietness import Quietness

    rec = ceiling.CeilingRecord(0.1698, "fp32", (8, 8, 8), "fastest call", "x", "2026-01-01", Quietness(
        "quiet", 0.0, 1.0, 1, 0.0, 1, ""), "2.9", "cpu")
    assert ceiling.admit(rec, None, estimated(0.1558)) == why


def test_the_first_ceiling_stays_the_basis_and_a_remeasure_is_a_named_new_version(timed):
    shape = (64, 128, 32)
    w, none = watch_of(timed), estimated()  # no peak here: whether the figure lies under it is tested above
    b1 = mfu.mfu_basis(CPU, "fp32", shape, watch=w, peaks=none)
    assert b1.kind == "measured ceiling" and b1.version == 1 and b1.shape == shape
    assert b1.tflops == pytest.approx(2 * 64 * 128 * 32 / 1e-3 / 1e12)
    assert "64×128×32 matmul" in b1.label() and "version 1" in b1.label() and b1.when
    assert b1.statistic == "fastest call" and b1.quietness is not None
    assert (b1.quietness.verdict, b1.quietness.share, b1.quietness.cause) == ("quiet", 0.02, "machine quiet")
    timed["min_s"] = 0.5e-3  # another lesson's faster run does not replace it
    assert mfu.mfu_basis(CPU, "fp32", shape, watch=w, peaks=none).version == 1
    b2 = mfu.mfu_basis(CPU, "fp32", shape, remeasure=True, watch=w, peaks=none)
    assert b2.version == 2 and b2.replaced and "version 1" in b2.label()
    assert mfu.mfu_basis(CPU, "fp32", shape, watch=w, peaks=none).tflops == pytest.approx(2 * b1.tflops)
    assert mfu.mfu_basis(CPU, "bf16", shape, watch=w, peaks=none).version == 1  # each dtype has its own basis


def test_a_utilization_above_100_percent_is_never_shown_and_its_ceiling_is_called_suspect():
    b = mfu.Basis(0.1, "measured ceiling", "fp32", "fastest of 5", "2026-01-01", (1, 2, 3), 1)
    assert mfu.shown_utilization(0.347, b) == "34.7 %"
    over = mfu.shown_utilization(1.04, b)
    assert "104" not in over and "%" not in over.split("(")[0] and "suspect" in over and "fp32 ceiling" in over
    assert mfu.shown_utilization(None) .startswith("unknown")


# ---------------------------------------------------------------- the one basis: storing, and the division


def _spec(dt, tflops):
    return mfu.Basis(tflops, "spec peak", dt, "datasheet")


def test_each_dtype_is_divided_by_its_own_basis():
    h100 = hardware.by_id("h100-sxm")
    bf, f32 = h100.peak("bf16"), h100.peak("tf32")
    assert bf and f32
    flops = {"bf16": 9e12, "tf32": 1e12}
    u = utilization(1.0, flops, {"bf16": _spec("bf16", bf), "tf32": _spec("tf32", f32)})
    ideal = 9e12 / (bf * 1e12) + 1e12 / (f32 * 1e12)
    assert u.mfu == pytest.approx(ideal) and u.effective_tflops == pytest.approx(10e12 / ideal / 1e12)
    assert 10e12 / (bf * 1e12) < u.mfu < 10e12 / (f32 * 1e12)  # neither all at the bf16 peak nor the tf32 one
    assert u.spec and "bf16 spec peak" in u.basis_label() and "tf32 spec peak" in u.basis_label()


def test_hardware_flops_give_the_hfu_and_a_missing_basis_gives_unknown():
    ceiling = mfu.Basis(2.0, "measured ceiling", "bf16", "fastest of 5", "2026-11-26 08:00", (8, 8, 8), 1)
    u = utilization(1.0, {"bf16": 1e12}, {"bf16": ceiling}, {"bf16": 1.2e12})
    assert u.mfu == pytest.approx(0.5) and u.hfu == pytest.approx(0.6)
    assert "peak unknown" in u.basis_label() and "2000 GFLOP/s" in u.basis_label() and "2026-11-26" in u.basis_label()
    none = utilization(0.5, {"fp8": 1e12}, {"bf16": ceiling})
    assert none.mfu is None and none.text() == "unknown (no basis)"


def test_no_utilization_above_100_percent_is_ever_reported():
    low = mfu.Basis(0.001, "measured ceiling", "fp32", "fastest of 5", "2026-11-26 08:00", (8, 8, 8), 1)
    u = utilization(0.1, {"fp32": 1e12}, {"fp32": low}, {"fp32": 1.3e12})
    assert u.mfu is None and u.hfu is None and u.suspect and "ceiling is suspect" in u.suspect
    assert u.text().startswith("not shown: the step ran at") and "%" not in u.text("hfu").split("(")[0]
    assert "ceiling is suspect" in u.basis_label() and u.as_dict()["mfu"] is None


def test_an_unknown_device_never_borrows_a_peak(timed, monkeypatch):
    """A CPU (or any device missing from the hardware table) gets 'peak unknown' and its own measured
    ceiling, never another device's spec peak, even where a CPU peak is estimated."""
    for dt in ("fp32", "bf16"):
        b = mfu.mfu_basis(CPU, dt, (8, 8, 8), watch=watch_of(timed))
        assert b.kind == "measured ceiling" and b.dtype == dt
        u = utilization(1.0, {dt: 1e6}, {dt: b})
        assert u.basis_label().startswith("peak unknown") and not u.spec


def test_unknown_peak_uses_the_measured_ceiling_for_the_dtype_that_ran(timed, monkeypatch):
    import perflab.core.measure as M

    asked = []

    def measure_matmul(m, n, k, dtype, *a, **kw):
        asked.append(dtype)
        return SimpleNamespace(min_s=1e-3, n_reps=5)

    monkeypatch.setattr(M, "measure_matmul", measure_matmul)
    bases = mfu.bases_for(CPU, ["bf16"], (8, 8, 8), watch=watch_of(timed))
    assert asked == ["bf16"] and bases["bf16"].tflops == pytest.approx(2 * 8**3 / 1e-3 / 1e12)
    u = utilization(0.5, {"bf16": 1e3}, bases, {"bf16": 1.2e3})
    assert u.mfu == pytest.approx(1e3 / (bases["bf16"].tflops * 1e12) / 0.5)
    assert u.hfu == pytest.approx(1.2 * u.mfu)


def test_the_published_figures_read_as_a_person_reads_them():
    from perflab.flops import mfu as M

    t = M.published_table()
    assert list(t.columns) == ["run", "quantity", "published", "perflab, from the paper's inputs", "reproduced"]
    palm = t[t["run"].str.startswith("PaLM") & (t["quantity"] == "mfu")].iloc[0]
    assert (palm["published"], palm["perflab, from the paper's inputs"], palm["reproduced"]) == ("46.2 %", "46.23 %", "yes")
    implied = t[t["quantity"].str.startswith("hfu (implied")].iloc[0]
    assert (implied["published"], implied["perflab, from the paper's inputs"], implied["reproduced"]) == (
        "57.8 %", "75% of a forward", "–")
    assert set(t[t["quantity"] == "days"]["published"]) == {"34 days", "84 days"}
    assert M.implied_recompute_text() == ("implied recompute: 75% of a forward pass; full rematerialization would give "
                                          "HFU 61.6%")


def test_narayanans_table_and_the_checklist_as_tables():
    from perflab.flops import mfu as M

    t = M.narayanan_table1_table()
    assert list(t.columns) == ["parameters (B)", "layers", "hidden", "GPUs", "batch", "TFLOP/s per GPU",
                               "HFU (published %)", "MFU (eq. 7, %)"]
    last = t.iloc[-1]
    assert (last["parameters (B)"], last["HFU (published %)"], last["MFU (eq. 7, %)"]) == ("1,008", "52", "39.2")
    c = M.checklist_table()
    assert list(c.index) == [q for _k, q, _w in M.CHECKLIST] and list(c.columns) == ["look at"]
