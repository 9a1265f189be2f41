"""Tests of `perflab.dataloading.panel`: the live panel's function, called as the panel calls it."""

import pytest
import torch

from perflab.dataloading import panel


@pytest.mark.timeout(120)
def test_live_measures_zero_and_the_chosen_workers_and_says_what_it_shows(watch_all_cores):
    from perflab.core.quietness import MadeUpLoad, injected

    with injected(MadeUpLoad(0.5, tick_s=1e-4)):
        table, text = panel.live(1, 0, 2, 1, batch=2, batches=3, device=torch.device("cpu"), cores=2)
    assert list(table.index) == [0, 1]
    assert set(table["machine"]) == {"disturbed: other programs used 50 % of 2 cores"}
    assert "Measured: inconclusive: the machine was busy (0 workers: other programs used 50 %" in text
    assert "hides from" not in text and "The model recommends:" in text and "disagrees" not in text
