"""What lessons 04–05 expect of a real GPU (run with `make test-gpu`; skipped without CUDA)."""

import pytest

from perflab.course import reference
from perflab.gemm import mamf, shapes, swiglu


@pytest.mark.gpu
def test_mamf_bf16_is_a_sane_fraction_of_the_spec_peak(tmp_path):
    from perflab.core.device import describe
    from perflab.core.hardware import peaks_for

    vals = mamf.parse_range(2048, 8192, 2048)
    r = mamf.search(vals, vals, vals, dtype="bf16", device="cuda", path=tmp_path / "m.jsonl", progress=False)
    peak = peaks_for(describe("cuda")).get("bf16")
    assert r.best["tflops"] > 0
    if peak:
        assert 0.3 < r.best["tflops"] / peak < 1.05, (r.best, peak)


@pytest.mark.gpu
def test_aligned_swiglu_width_beats_eight_thirds_on_gpu():
    """The published H100 run (h = 4096): 10944 ran 46% faster than 10922. Ask for at least 5% here."""
    s = swiglu.search(4096, 8192, widths=[10944], dtype="bf16", device="cuda", name="t_gpu_swiglu", progress=False)
    rows = {int(r["d_ff"]): r["tflops"] for r in s.frame.to_dict("records")}
    assert rows[10944] > 1.05 * rows[10922], rows


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


@pytest.mark.gpu
def test_recorders_write_gpu_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path / "results"))
    for kind in reference.KINDS:
        reference.record(kind, "cuda", smoke=True, root=tmp_path, progress=False)
    refs = {r.kind: r for k in reference.KINDS for r in reference.load_references(k, tmp_path)}
    assert set(refs) == set(reference.KINDS)
    for r in refs.values():
        assert r.on_gpu and r.provenance["sm_count"] and r.provenance["cuda_version"]
