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


def test_a_disturbed_row_is_neither_hidden_nor_not_hidden():
    busy = {"verdict": "disturbed", "share": 0.5, "wall_s": 1.0, "cores": 2, "others_cpu_s": 1.0, "own_threads": 2,
            "cause": "other programs used 50 % of 2 cores"}
    frame = _frame([(0, 0.020, 0.040, 0.020), (2, 0.001, 0.021, 0.0)])
    frame["quietness"] = [busy, None]
    text = measured_verdict(frame, "2 workers: loading hides behind compute")
    assert "0 workers: measured wait 20 ms = 50% of the step (inconclusive: the machine was busy (other programs" in text
    assert "Measured: loading hides from 2 workers on." in text
    frame["quietness"] = [busy, busy]
    text = measured_verdict(frame, "2 workers: loading hides behind compute")
    assert "Measured: inconclusive: the machine was busy (0 workers: other programs used 50 % of 2 cores; 2 workers" in text
    assert "disagrees" not in text and "hidden;" not in text
