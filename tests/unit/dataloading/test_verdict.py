"""Tests of `perflab.dataloading.verdict`."""

from __future__ import annotations

import pandas as pd

from perflab.dataloading.verdict import measured_verdict, plural


def _frame(rows):
    return pd.DataFrame([{"workers": w, "status": "ok", "data_wait_s": d, "step_s": s, "predicted_wait_s": p}
                         for w, d, s, p in rows])


def test_verdict_when_every_point_failed():
    frame = pd.DataFrame([{"workers": 0, "status": "error", "reason": "worker hung"},
                          {"workers": 2, "status": "timeout", "reason": "no batch within 5 s"}])
    assert measured_verdict(frame) == "nothing was measured (every point failed): see the reasons in the table"


def test_a_39_percent_wait_is_not_called_hidden():
    text = measured_verdict(_frame([(0, 0.020, 0.040, 0.020), (3, 0.0085, 0.0218, 0.001)]),
                            "3 workers: loading hides behind compute")
    assert "3 workers: measured wait 8.5 ms = 39" in text and "not hidden" in text
    assert "not hidden at any worker count" in text and "disagrees" in text


def test_hidden_from_the_first_count_below_ten_percent_and_plurals():
    text = measured_verdict(_frame([(0, 0.020, 0.040, 0.020), (1, 0.001, 0.021, 0.0)]))
    assert "hides from 1 worker on" in text and "1 workers" not in text
    assert plural(0, "worker") == "0 workers" and plural(2, "worker") == "2 workers"
