"""Tests of `perflab.dataloading.waits`: the measured waits typed, and what a disturbed point may say."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from perflab.core.results import SweepResult
from perflab.dataloading import waits

QUIET = {"verdict": "quiet", "share": 0.0, "wall_s": 1.0, "cores": 2, "others_cpu_s": 0.0, "own_threads": 2, "cause": ""}
BUSY = {**QUIET, "verdict": "disturbed", "share": 0.48, "cause": "other programs used 48 % of 2 cores"}


def _row(workers, wait, model, step, quietness, **kw):
    return {"params": {"workers": workers}, "status": "ok", "step_s": step, "data_wait_s": wait, "predicted_wait_s": model,
            "first_wait_s": wait * 2, "compute_share": 0.5, "handover_s": 0.0004, "quietness": quietness, **kw}


def _sweep(rows):
    return waits.WorkerSweep.from_sweep(SweepResult(path=Path("sweep.jsonl"), rows=rows, measured=len(rows)))


def test_a_disturbed_point_draws_no_conclusion():
    # the row: 78 ms of data wait while other programs ran, against a model of 20.8 ms
    sweep = _sweep([_row(0, 0.078, 0.0208, 0.098, BUSY), _row(2, 0.0017, 0.0025, 0.0217, QUIET)])
    p0 = sweep.point(0)
    assert p0 is not None and p0.disturbed and sweep.disturbed == [p0]
    assert p0.line() == ("0 workers: measured 78 ms, model 21 ms → inconclusive: the machine was busy "
                         "(other programs used 48 % of 2 cores)")
    assert sweep.wait_ms(0) is None and sweep.wait_ms(2) == pytest.approx(1.7)  # no reveal from a busy point
    text = sweep.verdict()
    assert "data wait, 0 against 2 workers: inconclusive: the machine was busy (0 workers: other programs" in text
    assert "halving" not in text and "2 workers: measured 1.7 ms, model 2.5 ms → within the tolerance" in text
    table = sweep.table()
    assert table.loc[0, "machine"] == "disturbed: other programs used 48 % of 2 cores"
    assert table.loc[2, "machine"] == "machine quiet" and table.loc[0, "data wait"] == "78 ms"
    js = p0.to_json()
    assert js["disturbed"] is True and js["quietness"]["verdict"] == "disturbed" and js["data_wait_s"] == 0.078


def test_quiet_points_compare_with_each_other_and_with_the_model():
    sweep = _sweep([_row(2, 0.0068, 0.0064, 0.0157, QUIET), _row(0, 0.027, 0.0209, 0.0346, QUIET)])
    assert [p.workers for p in sweep.points] == [0, 2]  # in order of workers
    text = sweep.verdict()
    assert text.splitlines()[0] == "data wait: 27 ms with 0 workers, 6.8 ms with 2 (more than a halving)"
    assert "0 workers: measured 27 ms, model 21 ms → within the tolerance" in text  # 6 ms ≤ 2 ms + 15 % of 34.6 ms
    far = _sweep([_row(0, 0.040, 0.0209, 0.050, QUIET)])
    assert "outside the tolerance" in far.verdict()
    assert sweep.handover_s == pytest.approx(0.0004)


def test_a_failed_point_keeps_its_reason_and_prints_its_old_json():
    sweep = _sweep([{"params": {"workers": 1}, "status": "error", "reason": "a DataLoader worker hung"}])
    (p,) = sweep.points
    assert not p.ok and sweep.failed == 1 and p.to_json() == {"workers": 1, "status": "error",
                                                             "reason": "a DataLoader worker hung"}
    assert sweep.table().loc[1, "machine"] == "error: a DataLoader worker hung" and sweep.wait_ms(1) is None


def test_the_plot_marks_a_disturbed_point():
    sweep = _sweep([_row(0, 0.078, 0.0208, 0.098, BUSY), _row(2, 0.0017, 0.0025, 0.0217, QUIET)])
    fig = sweep.figure("t")
    legend = fig.axes[0].get_legend()
    assert legend is not None
    labels = [t.get_text() for t in legend.get_texts()]
    assert "disturbed: other programs ran meanwhile" in labels


@pytest.mark.timeout(120)
def test_section_6s_experiments_and_the_fault_demo_run_and_read(watch_all_cores):
    from perflab.core.quietness import MadeUpLoad, injected
    from perflab.dataloading.compute import calibrate

    step = calibrate(1, torch.device("cpu"), budget_s=0.02)
    with injected(MadeUpLoad(0.0, tick_s=1e-4)):
        ep = waits.persistent_epochs(workers=1, batch=2, batches=2, io_ms=0, step=step)
        pf = waits.prefetch_depths([1], [2], batches=2, io_ms=0, compute_ms=1, step=step, handover_s=0.0)
    t = ep.table()
    assert list(t["persistent_workers"]) == [False, False, True, True] and list(t["epoch"]) == [1, 2, 1, 2]
    assert set(t["machine"]) == {"machine quiet"}
    assert list(pf.table().columns) == ["prefetch_factor", "batch", "measured wait", "model's median wait", "machine"]
    demo = waits.fault_demo(torch.device("cpu"))
    assert demo.raised.startswith("a DataLoader worker raised at step 1") and "sample 3 is corrupt" in demo.raised
    hung = demo.hung.point(1)
    assert hung is not None and not hung.ok and "no batch within timeout=0.3 s" in hung.reason
    assert "(1 worker)" in hung.reason  # one worker, in the singular
