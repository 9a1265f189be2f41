"""Tests of `perflab.dataloading.dataset`."""

from __future__ import annotations

import pytest

from perflab.core.errors import InputError
from perflab.dataloading import compute, dataset, loader

from .helpers import CPU


def test_make_dataset_calibrates_the_transform():
    ds = dataset.make_dataset(3, io_ms=0.0, transform_ms=0.0)
    assert len(ds) == 3 and ds.io_s == 0.0 and ds.rounds == 0
    x, y = ds[2]
    assert x.shape == (3, dataset.SIDE - 4, dataset.SIDE - 4) and int(y) == 2
    slow = dataset.make_dataset(3, io_ms=2.0, transform_ms=0.5)
    assert slow.io_s == pytest.approx(0.002) and slow.rounds >= 1


def test_a_dataset_shorter_than_the_run_is_one_line():
    step = compute.StepCompute(CPU, 8, 1, 0.0)
    ld = loader.make_loader(dataset.PipelineDataset(4), workers=0, batch=2)
    with pytest.raises(InputError, match="the dataset ran out after 2 batches; make it longer than 3 batches"):
        loader.run_epoch(ld, step, 3)
