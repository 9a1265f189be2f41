"""Predictions: read from the box or the papermill parameter, compared, recorded, summarised."""

import json

import pytest

from perflab.course import predict as P


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    P.reset()
    yield
    P.reset()


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


def test_no_prediction_says_so_and_still_shows_the_measurement():
    r = P.reveal(P.ask("02", "k", "step time", "ms", given={}), 12.5, device="d")
    assert r.record["predicted"] is None and r.record["error_pct"] is None
    assert "no prediction entered" in str(r) and "12.5 ms" in str(r)
    assert "no prediction entered" in P.calibration("02").verdict


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


def test_rerunning_a_cell_replaces_its_record_in_the_summary():
    P.reveal(P.ask("06", "x", "x", "s", given={"x": 1}), 2.0, device="d")
    P.reveal(P.ask("06", "x", "x", "s", given={"x": 2}), 2.0, device="d")
    assert len(P.calibration("06").records) == 1


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
