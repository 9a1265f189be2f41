"""Tests of `perflab.core.sizes`: a lesson's size table read for smoke runs, CPUs and GPUs."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from perflab.core.errors import InputError
from perflab.core.sizes import for_run, kind_of


@dataclass(frozen=True)
class S:
    n: int


TABLE = {"smoke": S(8), "cpu": S(256), "gpu": S(8192)}


def test_the_row_follows_the_run():
    assert for_run(TABLE, True, "cuda") == S(8)
    assert for_run(TABLE, False, torch.device("cpu")) == S(256) and for_run(TABLE, False, "mps") == S(256)
    assert for_run(TABLE, False, "cuda:1") == S(8192)
    assert for_run({"smoke": S(1), "gpu": S(2)}, False, "cpu") == S(2)  # no CPU row: the GPU's sizes
    assert kind_of(False, None) == "cpu"


def test_a_table_without_its_smoke_or_gpu_row_is_refused():
    with pytest.raises(InputError, match="'smoke' and 'gpu'"):
        for_run({"cpu": S(1)}, False, "cpu")
    with pytest.raises(InputError):
        for_run({"smoke": S(1), "gpu": S(2), "tpu": S(3)}, False, "cpu")
