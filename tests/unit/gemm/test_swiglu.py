"""Tests of `perflab.gemm.swiglu`."""

from __future__ import annotations

import types

import pytest

from perflab.core import sweepnoise as sn
from perflab.core.errors import InputError
from perflab.course.reference import published
from perflab.gemm import (
    swiglu,
)


def test_swiglu_refusals():
    import pandas as pd

    with pytest.raises(InputError, match=r"^radius must be ≥ 0 \(got -1\)$"):
        swiglu.candidate_widths(4096, radius=-1)
    frame = pd.DataFrame({"d_ff": [10880, 11008], "tflops": [1.0, 2.0], "params_delta_pct": [-0.39, 0.78]})
    with pytest.raises(InputError, match="^the parameter budget must be ≥ 0 percent$"):
        swiglu.recommend(frame, -1)
    with pytest.raises(InputError, match=r"^no measured width changes the parameters by at most 0.1%: widen the budget$"):
        swiglu.recommend(frame, 0.1)
    assert swiglu.recommend(frame, 0.5).d_ff == 10880


def test_swiglu_search_with_nothing_measured_says_why():
    import pandas as pd

    res = types.SimpleNamespace(frame=pd.DataFrame(), messages=["d_ff=10922: not enough memory"], path=None)
    with pytest.raises(InputError, match=r"^no width could be measured \(d_ff=10922: not enough memory\): choose smaller"):
        swiglu._assemble(4096, 8, "bf16", "cpu", 10922, res)
    res.messages = []
    with pytest.raises(InputError, match=r"^no width could be measured \(nothing ran\)"):
        swiglu._assemble(4096, 8, "bf16", "cpu", 10922, res)


def test_numpy_scalars_become_python_numbers():
    import numpy as np

    v = swiglu._py(np.int64(10944))
    assert v == 10944 and type(v) is int
    assert type(swiglu._py(np.float32(1.5))) is float and swiglu._py("x") == "x"


@pytest.mark.gpu
def test_the_aligned_and_eight_thirds_widths_are_both_measured_on_gpu():
    """The published H100 run (h = 4096): 10944 ran 46% faster than 10922. Whether it does here depends
    on who else uses the GPU, so only what load cannot change is asserted: both widths measured."""
    s = swiglu.search(4096, 8192, widths=[10944], dtype="bf16", device="cuda", name="t_gpu_swiglu", progress=False)
    rows = {int(r["d_ff"]): r["tflops"] for r in s.frame.to_dict("records")}
    assert rows[10944] > 0 and rows[10922] > 0, rows


def test_baseline_and_candidates_match_the_published_search():
    """S. Bekman, ML Engineering, 'SwiGLU-based MLP': for h = 4096, 8/3·h = 10922 and the search ran
    over 10822..11022; the winners 10944, 10848, 10880, 10912 and 11008 are all in the candidate set."""
    rec = published("swiglu_h100_h4096")
    h = rec["hidden"]
    assert swiglu.baseline_width(h) == 10922
    assert swiglu.eight_thirds(h) == pytest.approx(10922.67, abs=0.01)
    cands = swiglu.candidate_widths(h, radius=100, step=4)
    assert cands[0] >= 10822 and cands[-1] <= 11022 and len(cands) == 51
    for row in rec["rows"]:
        assert row["d_ff"] in cands
        assert swiglu.mlp_params(h, row["d_ff"]) == row["mlp_params"]  # 3·h·d_ff, the published column


def test_llama2_widths():
    rows = {r["model"]: r for r in published("swiglu_widths")["rows"]}
    assert rows["Llama-2-7B"]["d_ff"] / rows["Llama-2-7B"]["hidden"] == pytest.approx(2.6875)
    assert rows["Llama-2-70B"]["d_ff"] / rows["Llama-2-70B"]["hidden"] == pytest.approx(3.5)
    # 70B's MLP holds more parameters than a classic 4·h MLP (8h²); 7B's a little more than 8/3·h
    r70 = rows["Llama-2-70B"]
    assert swiglu.params_delta(r70["hidden"], r70["d_ff"]) > 0.3 * 8 * r70["hidden"] ** 2
    r7 = rows["Llama-2-7B"]
    assert swiglu.params_delta(r7["hidden"], r7["d_ff"]) == 3 * 4096 * 11008 - 8 * 4096**2


def test_params_delta_against_eight_thirds():
    # 3·h·(8/3·h) = 8h²: the baseline ⌊8/3·h⌋ is a little below it
    assert swiglu.params_delta(4096, 10922) == 3 * 4096 * 10922 - 8 * 4096 * 4096 == -8192
    assert swiglu.params_delta(3, 8) == 0


def test_flops_count():
    assert swiglu.mlp_flops(8192, 4096, 11008) == 18 * 8192 * 4096 * 11008
    assert swiglu.mlp_flops(10, 10, 10, backward=False) == 6 * 1000


def test_mlp_gemms_are_correct_and_complete():
    fn, check = swiglu.make_mlp_gemms(16, 8, 24, "fp32", "cpu")
    outs = fn()
    assert len(outs) == 8  # dx sums two GEMMs: 9 GEMMs in all
    assert [tuple(o.shape) for o in outs] == [(16, 24), (16, 24), (16, 8), (16, 24), (24, 8), (16, 8), (8, 24), (8, 24)]
    assert check() < 1e-5
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        fn()
    assert fc.get_total_flops() == swiglu.mlp_flops(16, 8, 24)  # torch's counter agrees with 18·T·h·d_ff


def test_search_on_cpu_ranks_and_reports():
    s = swiglu.search(64, 32, radius=8, step=4, dtype="fp32", device="cpu", rep_ms=3, warmup_ms=1, progress=False)
    df = s.frame
    assert s.baseline == 170 and 170 in set(df["d_ff"])
    assert list(df["rank_tflops"]) == list(range(1, len(df) + 1))
    assert df["tflops"].is_monotonic_decreasing
    assert set(df["rank_time"]) <= set(range(1, len(df) + 1))
    d = s.as_dict()
    assert d["baseline"] == 170 and {"d_ff", "tflops", "seconds", "params_delta"} <= set(d["candidates"][0])
    assert d["candidates"][0]["tflops"] == pytest.approx(df["tflops"].max())
    base = s.baseline_row
    assert base is not None and base.speedup_vs_baseline == pytest.approx(1.0)
    assert base.params_delta == 3 * 64 * 170 - 8 * 64 * 64 and base.is_baseline is True


def test_repeats_measure_every_width_and_the_baseline():
    s = swiglu.search(32, 16, widths=[84, 88], dtype="fp32", device="cpu", rep_ms=2, warmup_ms=1, repeats=2,
                      progress=False, name="t_repeats")
    assert sorted(s.frame["d_ff"]) == [84, 85, 88]  # the baseline ⌊8/3·32⌋ = 85 is always measured


def test_bad_inputs():
    with pytest.raises(InputError):
        swiglu.candidate_widths(0)
    with pytest.raises(InputError):
        swiglu.search(64, 0, device="cpu")
    with pytest.raises(InputError, match="GiB"):
        swiglu.search(10**6, 10**6, widths=[10**6], dtype="fp32", device="cpu")


QUIET = {"verdict": "quiet", "share": 0.0, "cause": "machine quiet"}
BUSY = {"verdict": "disturbed", "share": 0.5, "cause": "other programs used 50 % of 2 cores"}


def _injected(tflops_of, quiet_of=lambda w, n: QUIET):
    """A measure(params) with chosen TFLOP/s per width and call number, counting calls per width."""
    calls: dict[int, int] = {}

    def measure(p):
        w = p["d_ff"]
        calls[w] = calls.get(w, 0) + 1
        tf = tflops_of(w, calls[w])
        return {"tflops": tf, "seconds": swiglu.mlp_flops(p["tokens"], p["h"], w) / tf / 1e12, "spread": 0.01,
                "quietness": quiet_of(w, calls[w])}

    return measure, calls


def _flat(w):
    return 30.0 * (1 + 0.004 * ((w // 4) % 2))


def test_a_single_spike_is_measured_again_and_the_search_says_within_the_noise(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    measure, calls = _injected(lambda w, n: 42.5 if (w, n) == (176, 1) else _flat(w))
    s = swiglu.search(64, 32, radius=24, step=4, dtype="fp32", device="cpu", measure=measure, progress=False)
    assert calls[176] == 3 and s.remeasured >= 2  # the spike, measured twice more (beside the noise's controls)
    assert s.best.tflops < 31 and s.frame.loc[s.frame["d_ff"] == 176, "tflops"].iloc[0] < 31
    d = s.decision()
    assert d is not None and d.kind == "within the noise"
    text = s.choice(max_params_delta_pct=5.0)
    assert not text.startswith("choose") and "within the noise" in text
    assert "within the noise" in s.finding() and s.as_dict()["decision"]["kind"] == "within the noise"


def test_a_real_step_repeats_and_is_chosen(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    measure, calls = _injected(lambda w, n: 45.0 if w == 176 else _flat(w))
    s = swiglu.search(64, 32, radius=24, step=4, dtype="fp32", device="cpu", measure=measure, progress=False)
    row = s.frame.set_index("d_ff").loc[176]
    assert s.best.d_ff == 176 and row["status"] == "confirmed" and calls[176] == 3
    assert s.choice(max_params_delta_pct=5.0).startswith("choose d_ff = 176 for h = 64")
    d = s.decision()
    assert d is not None and d.kind == "choose"


def test_a_winner_measured_on_a_busy_machine_is_inconclusive(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    measure, calls = _injected(lambda w, n: 45.0 if w == 176 else _flat(w),
                               lambda w, n: BUSY if w == 176 else QUIET)
    s = swiglu.search(64, 32, radius=24, step=4, dtype="fp32", device="cpu", measure=measure, progress=False)
    assert calls[176] == 3 and bool(s.frame.set_index("d_ff").loc[176, "disturbed"])
    text = s.choice(max_params_delta_pct=5.0)
    assert text.startswith("no choice for h = 64: inconclusive: the machine was busy (other programs used 50 %")
    assert s.as_dict()["candidates"][0]["quietness"]["verdict"] == "disturbed"


def test_saved_results_say_they_are_saved_and_fresh_measures_again(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    measure, calls = _injected(lambda w, n: _flat(w))
    first = swiglu.search(64, 32, radius=8, dtype="fp32", device="cpu", measure=measure, progress=False)
    assert first.saved is None and first.saved_note() == ""
    # every width once, and the points measured again to read the run-to-run noise
    assert sum(calls.values()) == len(first.frame) + first.remeasured and first.remeasured == sn.CONTROLS
    again = swiglu.search(64, 32, radius=8, dtype="fp32", device="cpu", measure=measure, progress=False)
    assert sum(calls.values()) == len(first.frame) + first.remeasured  # nothing measured the second time
    note, saved = again.saved_note(), len(first.frame) + first.remeasured
    assert note.startswith(f"{saved} of {saved} measurements served from results saved 20"), note
    assert f"machine {saved} quiet" in note and "--fresh" in note
    fresh = swiglu.search(64, 32, radius=8, dtype="fp32", device="cpu", measure=measure, fresh=True, progress=False)
    assert fresh.saved is None and sum(calls.values()) == 2 * saved
    assert len(list(tmp_path.rglob("swiglu_h64_t32_fp32.*.jsonl"))) == 1  # set aside, not deleted


def test_the_alignment_sentence_follows_the_numbers(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    flat, _ = _injected(lambda w, n: _flat(w))
    s = swiglu.search(64, 32, radius=24, step=4, dtype="fp32", device="cpu", measure=flat, progress=False)
    assert s.alignment_finding().startswith("widths divisible by 64 ran at a median")
    assert "within the noise" in s.alignment_finding()
    fast, _ = _injected(lambda w, n: 40.0 if w % 64 == 0 else 30.0)
    s = swiglu.search(64, 32, radius=24, step=4, dtype="fp32", device="cpu", measure=fast, progress=False,
                      name="t_aligned")
    assert s.alignment_finding().endswith("faster, beyond the noise (with the sweep's noise, σ = 1.0 % per width, "
                                          "chance alone moves two widths apart by up to 1.04×)"), s.alignment_finding()
    assert "(1.33×)" in s.alignment_finding()


def test_the_table_says_which_widths_were_busy_and_what_each_status_means(monkeypatch, tmp_path):
    """Lesson 05 once printed "13 point(s) stayed disturbed" above a table whose every status read `ok`,
    with snake_case columns and 141.015 ms: the table now says it in words, with units and the digits a
    measurement supports."""
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    measure, _ = _injected(lambda w, n: 45.0 if w == 176 else _flat(w), lambda w, n: BUSY if w == 168 else QUIET)
    s = swiglu.search(64, 32, radius=24, step=4, dtype="fp32", device="cpu", measure=measure, progress=False)
    t = s.table()
    assert list(t.columns) == ["rank", "d_ff", "TFLOP/s", "time per MLP step", "vs ⌊8/3·h⌋ (×)", "parameters vs 8/3·h",
                               "divisible by", "measured (times)", "status", "machine while measured"]
    rows = {str(r["d_ff"]).split()[0]: r for r in t.to_dict("records")}
    assert rows["176"]["status"] == "stood out, repeated: may win" and rows["176"]["rank"] == 1
    assert rows["168"]["status"].endswith("; busy every time")
    assert rows["168"]["machine while measured"] == "busy: other programs used 50 % of 2 cores"
    assert rows["170"]["d_ff"] == "170 (⌊8/3·h⌋)" and rows["170"]["parameters vs 8/3·h"] == "-128 (-0.39 %)"
    assert all(__import__("re").fullmatch(r"\d[\d.,]* (ns|µs|ms|s)", x) for x in t["time per MLP step"]), t
    text = s.noise_sentence()
    assert text.startswith("The noise: σ = ") and "how far the widths measured twice moved between two quiet" in text
    assert "1 width(s) stood more than 3 σ above their neighbours: 1 repeated when measured again (may win)." in text
    assert "1 of 13 widths were measured on a busy machine every time" in text
    by = s.by_alignment()
    assert list(by.columns) == ["alignment", "widths", "measured on a busy machine", "median TFLOP/s (quiet ones)",
                                "best TFLOP/s (quiet ones)"]
    assert by.set_index("alignment").loc["multiple of 8, not 64", "measured on a busy machine"] == 1
    assert "(1 width(s) measured on a busy machine left out)" in s.alignment_finding()
    base = s.baseline_row
    assert base is not None and s.speedup == pytest.approx(s.best.tflops / base.tflops)
    assert s.speedup_quietness.verdict == "quiet"
    choice = s.choice(max_params_delta_pct=5.0)
    assert "TFLOP/s, " in choice and ".000" not in choice and "%) against" in choice


def test_an_unconfirmed_width_cannot_win_and_the_sentence_says_so():
    sweep = swiglu.SwigluSearch(64, 32, "fp32", "cpu", 170, __import__("pandas").DataFrame([
        {"d_ff": 176, "tflops": 2.0, "seconds": 1e-3, "status": "unconfirmed", "eligible": False, "disturbed": False,
         "multiple_of": 16, "quietness_json": QUIET},
        {"d_ff": 170, "tflops": 1.0, "seconds": 2e-3, "status": "ok", "eligible": True, "disturbed": True,
         "multiple_of": 2, "quietness_json": BUSY}]), noise=0.02)
    assert sweep.best.d_ff == 170  # the unconfirmed width may not win
    assert sweep.finding().startswith("fastest that may win: d_ff = 170 at 1.00 TFLOP/s (divisible by 2); ⌊8/3·h⌋ = 170")
    assert "1 width(s) stood more than 3 σ above their neighbours: 1 were measured only once, unconfirmed (cannot " \
           "win)." in sweep.noise_sentence()
    assert sweep.speedup_quietness.verdict == "disturbed"  # the baseline was busy every time
    assert sweep.table()["status"].tolist() == ["stood out, measured once: cannot win", "ok; busy every time"]


def test_search_sized_runs_the_lesson_at_a_row_of_its_table(monkeypatch, tmp_path):
    from perflab.gemm.sizes import SWIGLU

    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    s = swiglu.search_sized(SWIGLU["smoke"], "cpu", name="t_sized")
    assert (s.hidden, s.tokens, s.dtype) == (64, 32, "fp32") and s.baseline == 170
    assert len(s.frame) == len(swiglu.candidate_widths(64, 8, 4))


def test_a_sweep_busy_at_every_width_says_its_noise_is_the_timers_own():
    import pandas as pd

    rows = [{"d_ff": w, "tflops": 1.0 + 0.01 * i, "seconds": 1e-3, "status": "ok", "eligible": True, "disturbed": True,
             "multiple_of": 2, "quietness_json": BUSY} for i, w in enumerate((168, 170, 172))]
    s = swiglu.SwigluSearch(64, 32, "fp32", "cpu", 170, pd.DataFrame(rows), noise=0.05)
    text = s.noise_sentence()
    assert "every width was measured on a busy machine, so none was measured quietly twice" in text
    assert "No width stood more than 3 σ above its neighbours." in text and "3 of 3 widths were measured on a busy" in text
    assert s.alignment_finding().startswith("inconclusive: the machine was busy (other programs used 50 % of 2 cores)")


def test_a_baseline_that_did_not_repeat_is_named_so_in_the_finding():
    import pandas as pd

    rows = [{"d_ff": 168, "tflops": 1.0, "seconds": 1e-3, "status": "ok", "eligible": True, "disturbed": False,
             "multiple_of": 8, "quietness_json": QUIET},
            {"d_ff": 170, "tflops": 1.4, "seconds": 1e-3, "status": "unstable", "eligible": False, "disturbed": False,
             "multiple_of": 2, "quietness_json": QUIET}]
    s = swiglu.SwigluSearch(64, 32, "fp32", "cpu", 170, pd.DataFrame(rows), noise=0.02)
    assert s.finding().startswith("fastest that may win: d_ff = 168 at 1.00 TFLOP/s (divisible by 8); ⌊8/3·h⌋ = 170 at "
                                  "1.40 TFLOP/s (stood out, did not repeat: cannot win) → 0.714×: ")
