"""Tests of `perflab.distributed.ring`."""

from __future__ import annotations

import random

import matplotlib
import pytest
import torch

from perflab.distributed import ring as R

matplotlib.use("Agg")


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("numel", [8, 24, 29, 100])
def test_ring_simulation_sums(n, numel):
    rng = random.Random(n * 1000 + numel)
    bufs = [[rng.randint(-9, 9) for _ in range(numel)] for _ in range(n)]
    result, log = R.simulate_ring(bufs)
    total = [sum(b[i] for b in bufs) for i in range(numel)]
    assert all(r == total for r in result)
    # every rank sends N−1 times in each phase, to its right neighbour only
    for r in range(n):
        mine = [e for e in log if e.sender == r]
        assert len([e for e in mine if e.phase == "reduce-scatter"]) == n - 1
        assert len([e for e in mine if e.phase == "all-gather"]) == n - 1
        assert {e.receiver for e in mine} == {(r + 1) % n}


@pytest.mark.parametrize("n", [2, 4, 5, 8, 16])
def test_ring_traffic_is_2_n_minus_1_k_over_n(n):
    k = n * 1000
    assert R.ring_bytes_sent(k, n, 4) == [int(R.ring_bytes_formula(k, n, 4))] * n
    assert R.ring_bytes_formula(k, n, 4) == 2 * (n - 1) * k / n * 4
    # ≈ 2K for large N (the playbook's "about 2×K"), and much less than what a root carries
    assert R.ring_bytes_formula(k, n, 1) < 2 * k <= R.naive_root_bytes(k, n, 1)


def test_ring_uneven_chunks_still_exact():
    sent = R.ring_bytes_sent(10, 4, 1)  # chunks 3, 3, 2, 2
    assert R.chunk_sizes(10, 4) == [3, 3, 2, 2] and sum(sent) == 2 * 3 * 10  # every chunk travels 2(N−1) times


def test_ring_single_rank_is_a_copy():
    x = torch.arange(5.0)
    y = R.ring_all_reduce(x, 0, 1)
    assert torch.equal(x, y) and y.data_ptr() != x.data_ptr()


def test_plot_traffic_ring_against_a_root():
    fig = R.plot_traffic(2**20, ns=(2, 4, 8), measured={4: R.ring_bytes_formula(2**20, 4, 4)})
    ax = fig.axes[0]
    assert ax.get_ylabel() == "bytes sent per rank (MiB)" and ax.get_xlabel() == "ranks N"
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["ring: 2(N−1)K/N per rank"].get_ydata()) == pytest.approx([4.0, 6.0, 7.0])
    assert list(lines["through a root: 2(N−1)K on the root's link"].get_ydata()) == pytest.approx([8.0, 24.0, 56.0])
    assert list(lines["measured here, N=4"].get_ydata()) == pytest.approx([6.0])


def test_ring_steps_table_names_each_send():
    _, log = R.simulate_ring([[1, 2, 3], [10, 20, 30], [100, 200, 300]])
    t = R.ring_steps(log)
    assert list(t.columns) == ["phase", "step", "send", "chunk", "values"] and len(t) == 2 * 2 * 3
    assert t.iloc[0].to_dict() == {"phase": "reduce-scatter", "step": 0, "send": "0 → 1", "chunk": 0, "values": "[1]"}
