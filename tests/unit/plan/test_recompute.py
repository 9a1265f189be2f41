"""Tests of `perflab.plan.recompute`: torch's SAC greedy order and the choice for a budget."""

from __future__ import annotations

import pytest

from perflab.plan.cost import cluster
from perflab.plan.recompute import OpChoice, choose, greedy_order
from perflab.plan.step import Layout

from .factories import tiny_gpt


def test_the_greedy_order_puts_cheap_big_activations_before_products():
    order, n_blocks = greedy_order(lambda: tiny_gpt(8, 128), Layout(2, fsdp=True, dtype="fp32"), cluster("h100"))
    assert n_blocks == 2
    names = [o.name for o in order]
    assert "addmm" in names or "mm" in names
    rates = [o.bytes_per_second for o in order]
    product = names.index("addmm") if "addmm" in names else names.index("mm")
    # gelu frees as many bytes as an MLP product's output for a fraction of its time
    assert "gelu" in names and names.index("gelu") < product and rates[names.index("gelu")] > rates[product]


def test_choose_stops_once_the_need_is_met_and_takes_all_when_it_cannot_be():
    order = [OpChoice("gelu", 100, 1.0), OpChoice("add", 50, 1.0), OpChoice("mm", 200, 10.0)]
    assert [o.name for o in choose(order, 150, 1)] == ["gelu", "add"]  # 100 + 50 in one block
    assert [o.name for o in choose(order, 150, 2)] == ["gelu"]  # 100 per block × 2 blocks
    assert [o.name for o in choose(order, 250, 2)] == ["gelu", "add"]
    assert [o.name for o in choose(order, 10_000, 2)] == ["gelu", "add", "mm"]
    assert choose(order, 0, 2) == []
    assert OpChoice("x", 10, 0.0).bytes_per_second == pytest.approx(float("inf"))
