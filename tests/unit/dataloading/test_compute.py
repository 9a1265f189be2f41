"""Tests of `perflab.dataloading.compute`."""

import pytest
import torch

from perflab.dataloading import loader
from perflab.dataloading.compute import calibrate


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_hung_worker_is_caught_by_the_timeout_and_the_sweep_goes_on(tmp_path):
    step = calibrate(1, torch.device("cpu"), budget_s=0.02)
    res = loader.sweep_workers([0, 1], batch=2, batches=3, io_ms=0, transform_ms=0, step=step, timeout=0.5,
                               hang_at=1, hang_s=2.0, path=tmp_path / "s.jsonl")
    by = {r["params"]["workers"]: r for r in res.rows}
    assert by[1]["status"] == "error" and "hung" in by[1]["reason"] and "timeout=0.5" in by[1]["reason"]
    assert by[0]["status"] == "ok"  # without workers the hang is just a slow step: recorded, measured
    assert res.failed == 1 and len(res.rows) == 2


@pytest.mark.timeout(60)
def test_persistent_workers_survive_the_epoch():
    step = calibrate(1, torch.device("cpu"), budget_s=0.02)
    eps = loader.measure_loop(workers=1, batch=2, batches=3, io_ms=0, transform_ms=0, step=step, persistent=True,
                              epochs=2, rounds=0)
    assert len(eps) == 2 and all(len(e.waits_s) == 3 for e in eps)
