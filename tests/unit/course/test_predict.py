"""Predictions typed after their result was shown are marked late and left out of the calibration."""

from perflab.course import predict as P


def test_a_prediction_entered_after_its_reveal_is_late_and_left_out(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFLAB_RESULTS", str(tmp_path))
    P.reset()
    box = {"v": None}
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
