"""Tests of `perflab.dataloading.loader`."""

import pytest
import torch

from perflab.dataloading import loader
from perflab.dataloading.compute import calibrate


@pytest.mark.timeout(60)
def test_zero_worker_prediction_carries_the_measured_handover():
    # batch 8 × 2 ms of IO: the old model said exactly 16 ms; the loop's own cost (sampler, the
    # dataset's fixed work, collate, the sleep's overshoot) comes on top, measured, not typed in.
    # How close the measured wait comes to the prediction depends on the machine's load (lesson 07
    # shows it live); here only what load cannot change.
    step = calibrate(5, torch.device("cpu"))
    res = loader.sweep_workers([0], batch=8, batches=12, io_ms=2, transform_ms=0, step=step, timeout=20)
    r = res.rows[0]
    assert r["status"] == "ok", res.messages
    old = 8 * 0.002  # what the model without the term predicted
    assert r["inline_s"] > 0 and r["predicted_wait_s"] == pytest.approx(old + r["inline_s"])
    assert r["data_wait_s"] >= old, r  # eight sleeps of 2 ms are never shorter: the old model was always short
    assert r["quietness"]["verdict"] in ("quiet", "disturbed", "unknown") and r["waited_s"] >= 0.0


@pytest.mark.timeout(60)
def test_a_sweep_point_records_each_worker_count_with_its_quietness():
    # the setting: batch 4, 5 ms of IO per sample, no transform, 20 ms of compute per step.
    # Whether two workers cut the wait by half depends on what else runs on the cores: lesson 07
    # measures it live beside its prediction; here only what load cannot change is asserted
    step = calibrate(20, torch.device("cpu"))
    res = loader.sweep_workers([0, 2], batch=4, batches=20, io_ms=5, transform_ms=0, step=step, timeout=20)
    rows = {r["params"]["workers"]: r for r in res.rows}
    assert set(rows) == {0, 2} and all(r["status"] == "ok" for r in rows.values()), res.messages
    assert rows[0]["data_wait_s"] >= 4 * 0.005  # with no worker the loop sleeps through every read itself
    for r in rows.values():
        assert r["step_s"] >= r["data_wait_s"] >= 0.0 and r["predicted_wait_s"] >= 0.0
        assert r["quietness"]["verdict"] in ("quiet", "disturbed", "unknown")


@pytest.mark.usefixtures("watch_all_cores")
def test_a_measured_loop_takes_its_turn_on_the_device_and_records_the_machines_quietness(monkeypatch):
    from perflab.core.quietness import MadeUpLoad, injected

    taken = []
    from perflab.core import lock

    real = lock.device_lock

    def spy(device, **kw):
        taken.append((str(device), kw.get("label")))
        return real(device, **kw)

    monkeypatch.setattr("perflab.core.lock.device_lock", spy)
    step = calibrate(1, torch.device("cpu"), budget_s=0.02)
    with injected(MadeUpLoad(0.5, tick_s=1e-4)):
        res = loader.measure_loop(workers=0, batch=2, batches=4, io_ms=1, transform_ms=0, step=step)[0]
    assert taken and taken[0][0] == "cpu" and "DataLoader" in taken[0][1]
    q = res.as_dict()["quietness"]
    assert q["verdict"] == "disturbed" and q["share"] == pytest.approx(0.5) and res.as_dict()["waited_s"] >= 0.0


@pytest.mark.timeout(60)
def test_a_raising_worker_is_one_clear_message():
    step = calibrate(1, torch.device("cpu"), budget_s=0.02)
    with pytest.raises(loader.LoaderFault) as e:
        loader.measure_loop(workers=1, batch=2, batches=4, io_ms=0, transform_ms=0, step=step, fail_at=3, timeout=20)
    msg = str(e.value)
    assert msg.splitlines()[0].startswith("a DataLoader worker raised at step 1")
    assert "sample 3 is corrupt" in msg and "Traceback" in msg


@pytest.mark.timeout(60)
def test_a_transform_runs_on_the_loops_own_threads_without_workers_and_on_one_in_a_worker():
    # where the sample is made: with num_workers=0 in the training loop's process, on the intra-op threads its
    # step's ops use; in a worker process, which PyTorch's worker loop sets to one thread
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        seen = loader.transform_threads()
        assert (seen.main, seen.worker) == (2, 1)
        assert "2 intra-op threads with num_workers=0" in seen.text() and "on 1 in a DataLoader worker" in seen.text()
    finally:
        torch.set_num_threads(before)
