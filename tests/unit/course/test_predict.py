"""Tests of `perflab.course.predict`: predictions asked, revealed, scored and calibrated (a prediction
typed after its result was shown is marked late and left out of the calibration)."""

from __future__ import annotations

import json

import pytest

from perflab.course import predict as P


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    P.reset()
    yield
    P.reset()


# ----------------------------------------------------------------------------- predictions
@pytest.fixture
def predict(tmp_path, monkeypatch):
    from perflab.course import predict as P

    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    P.reset()
    yield P
    P.reset()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "1e999"])
def test_a_number_that_is_not_finite_is_refused(predict, value):
    with pytest.raises(ValueError, match=r"is not a finite number$"):
        predict.parse_number(value)


def test_an_empty_list_of_choices_is_refused(predict):
    with pytest.raises(ValueError, match=r"^choices, when given, must list at least one answer$"):
        predict.ask("04", "k", "which?", choices=[])


def test_choices_show_a_verdict_and_the_calibration_counts_them(predict, tmp_path):
    right = predict.reveal(predict.ask("04", "a", "which is faster?", choices=["x", "y"], given={"a": "x"}), "x",
                           device="d")
    wrong = predict.reveal(predict.ask("04", "b", "which is slower?", choices=["x", "y"], given={"b": "x"}), "y",
                           device="d")
    predict.reveal(predict.ask("04", "c", "step time", "ms", given={"c": 12}), 10.0, device="d")
    assert dict(right.rows)["verdict"] == "right" and dict(wrong.rows)["verdict"] == "not this time"
    assert str(wrong).splitlines()[-1].split() == ["verdict", "not", "this", "time"]
    cal = predict.calibration("04")
    assert cal.verdict == ("lesson 04: 3 of 3 predicted; numbers: median miss 20 %, 1 over, 0 under "
                           "(you tend to over-estimate); choices: 1 of 2 right")
    assert str(cal).splitlines() == [cal.verdict, "  which is faster?: x vs x (right)",
                                     "  which is slower?: x vs y (wrong)", "  step time: 12 ms vs 10 ms (+20 %)"]
    page = cal._repr_html_()
    assert page.startswith("<div class='perflab-calibration'><b>lesson 04: 3 of 3 predicted;")
    assert "<td>which is slower?</td>" in page and "<td>+20 %</td>" in page
    assert predict.calibration("none")._repr_html_() == (
        "<div class='perflab-calibration'><b>lesson none: nothing was predicted yet</b></div>")
    saved = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert [(x["key"], x["correct"]) for x in saved] == [("a", True), ("b", False), ("c", None)]


def test_prediction_repr_and_a_record_that_cannot_be_written(tmp_path, monkeypatch):
    from perflab.course import predict

    p = predict.Prediction("10", "k", "speed-up here", unit="×")
    assert repr(p) == "Predict: speed-up here [×] — not entered yet"
    p2 = predict.Prediction("10", "k", "speed-up here", unit="×", given=1.5)
    assert repr(p2) == "Predict: speed-up here [×] — 1.5"
    ro = tmp_path / "read-only"
    ro.mkdir()
    (ro / "predictions.jsonl").mkdir()  # a folder where the record file should be: the write fails
    monkeypatch.setenv("PERFLAB_RESULTS", str(ro))
    predict._append({"lesson": "10"})  # the lesson goes on; the record stays in memory
    monkeypatch.setattr("perflab.core.device.describe", lambda *a: (_ for _ in ()).throw(RuntimeError("no device")))
    assert predict._device_name() == "unknown"


@pytest.mark.parametrize("text,want", [("0.3", 0.3), ("3e-1", 0.3), ("1,234", 1234.0), ("12 ms", 12.0),
                                       (" -2.5 ", -2.5), ("", None), (None, None), (7, 7.0)])
def test_parse_number_reads_what_learners_type(text, want):
    assert P.parse_number(text) == want


@pytest.mark.parametrize("text", ["abc", "ms 12", "nan", "inf", True])
def test_parse_number_refuses_non_numbers_in_one_line(text):
    with pytest.raises(ValueError) as e:
        P.parse_number(text)
    assert "\n" not in str(e.value)


def test_numeric_prediction_error_sign_direction_and_record(tmp_path):
    p = P.ask("01", "tf", "TFLOP/s of a 1024³ matmul", "TFLOP/s", given={"tf": "0.2"})
    r = P.reveal(p, 0.1, device="test-cpu")
    assert r.record["error_pct"] == pytest.approx(100.0)
    assert r.record["direction"] == "over-estimated"
    low = P.reveal(P.ask("01", "lo", "q", "ms", given={"lo": 5}), 10.0, device="d")
    assert low.record["error_pct"] == pytest.approx(-50.0) and low.record["direction"] == "under-estimated"
    near = P.reveal(P.ask("01", "near", "q", "ms", given={"near": 10.5}), 10.0, device="d")
    assert near.record["direction"] == "on the mark"
    lines = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert [x["key"] for x in lines] == ["tf", "lo", "near"]
    assert {"lesson", "key", "question", "unit", "predicted", "measured", "error_pct", "device", "time"} <= set(lines[0])
    assert "+100 %" in str(r) and "over-estimated" in str(r)


def test_no_prediction_says_how_to_predict_without_scolding():
    """Run All runs every cell before anyone could type: that learner has not failed, and is told how
    to predict as they go."""
    r = P.reveal(P.ask("02", "k", "step time", "ms", given={}), 12.5, device="d")
    assert r.record["predicted"] is None and r.record["error_pct"] is None
    assert "no prediction entered" in str(r) and "12.5 ms" in str(r)
    assert "one cell at a time (Shift-Enter)" in r.note and "Run All" in r.note
    verdict = P.calibration("02").verdict
    assert verdict.startswith("lesson 02: nothing to calibrate yet (1 asked, none entered before its result)")
    assert "one cell at a time" in verdict and "or nothing here is calibrated" not in verdict


def test_unreadable_prediction_is_one_line_not_a_traceback():
    r = P.reveal(P.ask("02", "k", "step time", "ms", given={"k": "fast"}), 12.5, device="d")
    assert r.record["predicted"] is None and "could not read 'fast'" in r.note


def test_choices_are_matched_case_insensitively_and_graded():
    p = P.ask("04", "cliff", "where is the cliff?", choices=["before 1024", "after 1024"], given={"cliff": "After 1024"})
    assert p.value == "after 1024"
    assert P.reveal(p, "after 1024", device="d").record["correct"] is True
    wrong = P.ask("04", "c2", "which?", choices=["a", "b"], given={"c2": "a"})
    assert P.reveal(wrong, "b", device="d").record["correct"] is False
    with pytest.raises(ValueError):
        _ = P.ask("04", "c3", "which?", choices=["a", "b"], given={"c3": "z"}).value


def test_calibration_summarises_misses_and_lean():
    for key, guess in (("a", 20.0), ("b", 30.0), ("c", 9.0)):
        P.reveal(P.ask("05", key, key, "ms", given={key: guess}), 10.0, device="d")
    P.reveal(P.ask("05", "d", "d", "ms"), 10.0, device="d")
    cal = P.calibration("05")
    assert "3 of 4 predicted" in cal.verdict
    assert "median miss 100 %" in cal.verdict  # misses 100, 200, 10 -> median 100
    assert "over-estimate" in cal.verdict
    f = cal.frame()
    assert list(f.columns) == ["question", "prediction", "measured", "miss"] and len(f) == 4
    assert P.calibration("other").verdict.endswith("nothing was predicted yet")


def test_rerunning_a_cell_replaces_its_record_and_keeps_the_prediction_made_in_time():
    """A prediction made before the result, then changed and the cell run again: the first one stays the
    prediction (it was lost before), and the change is said to have come after the result."""
    P.reveal(P.ask("06", "x", "x", "s", given={"x": 1}), 2.0, device="d")
    again = P.reveal(P.ask("06", "x", "x", "s", given={"x": 2}), 2.5, device="d")
    assert len(P.calibration("06").records) == 1
    assert again.record["predicted"] == 1.0 and again.record["changed_to"] == 2.0 and not again.record["late"]
    assert again.record["measured"] == 2.5 and again.record["error_pct"] == pytest.approx(-60.0)
    assert again.note == ("changed to 2 s after the result was shown: your prediction stays the one entered before "
                          "it, 1 s")
    assert P.calibration("06").verdict.startswith("lesson 06: 1 of 1 predicted; numbers: median miss 60 %")


def test_a_measurement_on_a_busy_machine_is_shown_but_not_scored():
    busy = {"verdict": "disturbed", "share": 0.5, "cause": "other programs used 50 % of 2 cores"}
    r = P.reveal(P.ask("09", "a", "step time", "ms", given={"a": 10}), 20.0, device="d", quietness=busy)
    assert r.record["busy"] == "other programs used 50 % of 2 cores" and r.record["error_pct"] is None
    assert dict(r.rows)["error"] == "not scored: the machine was busy (other programs used 50 % of 2 cores)"
    quiet = {"verdict": "quiet", "share": 0.0, "cause": ""}
    P.reveal(P.ask("09", "b", "step time", "ms", given={"b": 10}), 10.0, device="d", quietness=quiet)
    cal = P.calibration("09")
    assert [x["key"] for x in cal.entered] == ["b"] and [x["key"] for x in cal.busy] == ["a"]
    assert cal.verdict.endswith("; 1 measured on a busy machine, not scored")
    assert list(cal.frame()["miss"]) == ["not scored: machine busy", "0 %"]
    P.reset()
    P.reveal(P.ask("09", "a", "step time", "ms", given={"a": 10}), 20.0, device="d", quietness=busy)
    assert P.calibration("09").verdict.startswith("lesson 09: nothing scored: 1 asked, and every prediction entered")


def test_widget_entry_wins_over_nothing_and_is_read_at_reveal_time():
    pytest.importorskip("ipywidgets")
    p = P.ask("07", "w", "wait per step", "ms")
    box = p.widget()
    assert p.value is None
    box.value = "3.5"
    assert P.reveal(p, 7.0, device="d").record["predicted"] == 3.5


def test_numbers_show_without_padded_zeros():
    r = P.reveal(P.ask("05", "x", "speed-up", "×", given={"x": 1.2}), 1.5, device="d")
    assert "1.2 ×" in str(r) and "1.5 ×" in str(r) and "1.20" not in str(r)
    # a count (lesson 01's nn.Linear FLOPs) is written in full, never in e-notation
    flops = P.reveal(P.ask("01", "f", "FLOPs", "FLOPs", given={"f": 5e8}), 536870912.0, device="d", save=False)
    assert "536,870,912 FLOPs" in str(flops) and "500,000,000 FLOPs" in str(flops) and "e+" not in str(flops)
    assert P.num(2.5e6) == "2,500,000" and P.num(2.56e6 + 0.5) == "2.56e+06"


def test_a_prediction_checked_against_a_published_figure_never_reads_measured(tmp_path):
    """Where this machine cannot measure the quantity (one NUMA node), lesson 08 checks the
    prediction against a published figure: the table, the record and the calibration say so."""
    p = P.ask("08", "ratio", "remote / local latency", "×", given={"ratio": 2})
    r = P.reveal(p, 1.6, against="published (Intel MLC)", device="2x Xeon 8360Y")
    assert dict(r.rows)["published (Intel MLC)"] == "1.6 ×" and "measured" not in dict(r.rows)
    assert r.record["against"] == "published (Intel MLC)" and r.record["device"] == "2x Xeon 8360Y"
    assert r.record["error_pct"] == pytest.approx(25.0) and r.record["direction"] == "over-estimated"
    line = json.loads((tmp_path / "predictions.jsonl").read_text().splitlines()[-1])
    assert line["against"] == "published (Intel MLC)"
    assert P.calibration("08").frame()["measured"].tolist() == ["1.6 × (published (Intel MLC))"]
    plain = P.reveal(P.ask("08", "m", "q", "ms", given={"m": 1}), 1.0, device="d")
    assert "against" not in plain.record and dict(plain.rows)["measured"] == "1 ms"


def test_a_prediction_entered_after_its_reveal_is_late_and_left_out(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    P.reset()
    box: dict[str, str | None] = {"v": None}
    late = P.ask("xx", "late", "step time", "ms")
    monkeypatch.setattr(P.Prediction, "raw", property(lambda self: box["v"] if self.key == "late" else self.given))
    first = P.reveal(late, 10.0)  # nothing typed when the result was shown
    assert first.record["late"] is False and "no prediction entered" in first.note
    box["v"] = "10"  # typed after seeing 10 ms, then the measurement cell is run again
    again = P.reveal(late, 10.0)
    assert again.record["late"] is True and "left out of your calibration" in str(again)
    on_time = P.ask("xx", "on_time", "share", "%", given={"on_time": 50})
    P.reveal(on_time, 40.0)
    P.reveal(on_time, 40.0)  # the same prediction read again is not late
    cal = P.calibration("xx")
    assert [r["key"] for r in cal.entered] == ["on_time"] and len(cal.late) == 1
    assert "1 entered after the result was shown, left out" in cal.verdict
    assert list(cal.frame()["miss"]) == ["late: left out", "+25 %"]
    P.reset()


def test_nothing_to_compare_with_is_said_and_not_scored():
    r = P.reveal(P.ask("00", "pct", "share of the peak", "%", given={"pct": 50}), None, device="d",
                 missing="No fp32 peak is known for this device, so there is no percentage to compare with.")
    assert dict(r.rows)["measured"] == "not known here" and r.record["error_pct"] is None
    assert r.note.startswith("No fp32 peak is known") and P.calibration("00").entered == []
