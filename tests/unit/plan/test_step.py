"""Tests of `perflab.plan.step`: the step on a fake process group, by part, as the layout shards it."""

from __future__ import annotations

import pytest

from perflab.core.errors import InputError
from perflab.plan.cost import cluster
from perflab.plan.step import PARTS, Layout, run_step
from perflab.workload.models import param_count, preset

from .factories import tiny_gpt


@pytest.fixture(scope="module")
def traces():
    c = cluster("h100")
    return {k: run_step(tiny_gpt, lay, c) for k, lay in {
        "fsdp2": Layout(2, fsdp=True, dtype="fp32"), "fsdp4": Layout(4, fsdp=True, dtype="fp32"),
        "tp2": Layout(2, tp=2, dtype="fp32"), "ddp": Layout(2, dtype="fp32")}.items()}


def test_fsdp_shards_the_optimizer_state_and_issues_gathers_and_reduce_scatters(traces):
    n = param_count(preset("tiny-gpt"))
    t2, t4 = traces["fsdp2"], traces["fsdp4"]
    assert t2.params_total == n and set(t2.parts) == set(PARTS) and sum(t2.parts.values()) == t2.peak_bytes
    # AdamW keeps two fp32 moments per parameter: 8 bytes × N ÷ ranks (and the step counters)
    assert t2.parts["optimizer state"] == pytest.approx(8 * n / 2, rel=0.01)
    assert t4.parts["optimizer state"] == pytest.approx(8 * n / 4, rel=0.01)
    kinds = {e.kind for e in t2.events}
    assert {"all_gather", "reduce_scatter", "compute"} <= kinds
    # without FSDP every rank keeps all of it
    assert traces["ddp"].parts["optimizer state"] == pytest.approx(8 * n, rel=0.01)


def test_tensor_parallelism_all_reduces_and_splits_the_blocks_work(traces):
    tp, one = traces["tp2"], traces["ddp"]
    assert any(e.kind == "all_reduce" and not e.overlap for e in tp.events)
    assert tp.flops["forward"] < one.flops["forward"]
    assert tp.parts["optimizer state"] < one.parts["optimizer state"]


def test_a_bad_layout_is_one_line():
    c = cluster("h100")
    with pytest.raises(InputError, match="--tp 3 does not divide --gpus 8"):
        Layout(8, tp=3).check(c)
    with pytest.raises(InputError, match="--tp 16 spans nodes"):
        Layout(16, tp=16).check(c)
    with pytest.raises(InputError, match="--ac 'some'"):
        Layout(8, ac="some").check(c)


class _ValueDependent(__import__("torch").nn.Module):
    def __init__(self):
        import torch

        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x) * float(x.sum().item())  # the value of a tensor: unknowable without data


def test_a_model_whose_step_reads_tensor_values_is_one_line():
    import torch

    from perflab.audit.target import target_from

    def build():
        return target_from({"model": _ValueDependent(), "batches": [(torch.randn(4, 8), torch.randn(4, 8))]})

    with pytest.raises(InputError, match="cannot run on shapes alone"):
        run_step(build, Layout(2, dtype="fp32"), cluster("h100"))
