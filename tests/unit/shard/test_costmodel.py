"""The communication cost model of lesson 12: time = bytes / busbw, ZeRO-3's 3Ψ against DDP's 2Ψ, prefetch."""

import pytest

from perflab.core.errors import InputError
from perflab.distributed import busbw
from perflab.shard import costmodel


def test_collective_time_inverts_nccl_tests_busbw():
    t = costmodel.collective_seconds("all_reduce", 2**30, 8, busbw_gbps=150)
    assert busbw.busbw_gbps("all_reduce", 2**30, t, 8) == pytest.approx(150)
    t2 = costmodel.collective_seconds("all_gather", 2**30, 8, busbw_gbps=150)
    assert t == pytest.approx(2 * t2)  # all-reduce = reduce-scatter + all-gather


def test_zero3_sends_one_and_a_half_times_ddp():
    tr = costmodel.step_traffic(1e9, 8, itemsize=2, busbw_gbps=100)
    assert tr.ddp.psi == pytest.approx(2 * 7 / 8)
    assert tr.zero3.psi == pytest.approx(3 * 7 / 8)
    assert tr.ratio == pytest.approx(1.5)
    assert tr.zero3.seconds == pytest.approx(1.5 * tr.ddp.seconds)
    assert tr.ddp.seconds == pytest.approx(2 * 7 / 8 * 2e9 / 100e9)
    assert tr.ddp.ops == ["reduce_scatter", "all_gather"] and tr.zero3.ops == ["all_gather", "all_gather", "reduce_scatter"]
    assert "arxiv.org/abs/1910.02054" in tr.source
    assert costmodel.step_traffic(1e9, 8).ddp.seconds is None  # no busbw, no time


def test_prefetch_hides_a_gather_shorter_than_the_compute():
    unit = 50e6
    g = costmodel.collective_seconds("all_gather", unit, 4, busbw_gbps=50)
    hidden = costmodel.prefetch(unit_bytes=unit, n=4, busbw_gbps=50, unit_forward_s=2 * g)
    assert hidden.forward.hidden and hidden.forward.exposed_s == 0
    short = costmodel.prefetch(unit_bytes=unit, n=4, busbw_gbps=50, unit_forward_s=0.75 * g)
    assert not short.forward.hidden and short.forward.exposed_s == pytest.approx(0.25 * g)
    assert short.backward.hidden  # the backward is twice the forward
    assert short.break_even_forward_s == pytest.approx(g) and short.gather_s == pytest.approx(g)


def test_bad_input_is_one_line():
    with pytest.raises(InputError):
        costmodel.collective_seconds("all_gather", 0, 4, busbw_gbps=10)
    with pytest.raises(InputError):
        costmodel.step_traffic(1e6, 1)
    with pytest.raises(InputError):
        costmodel.prefetch(unit_bytes=1e6, n=4, busbw_gbps=-1, unit_forward_s=1)


def test_lesson_12s_example_for_gpt2_small_on_eight_h100s():
    from perflab.workload.models import param_count, preset

    cfg = preset("gpt2-small")
    ex = costmodel.example(cfg, 8, 8 * 1024)
    assert ex.psi == param_count(cfg) and ex.describe().startswith(f"gpt2-small: Ψ = {param_count(cfg):,} parameters, bf16; 8 ranks")
    table = ex.table()
    assert list(table.index) == ["DDP sends", "ZeRO-3 sends", "DDP comm", "ZeRO-3 comm", "one block's all-gather",
                                 "block forward at peak", "hidden in forward", "hidden in backward"]
    nvlink, ib = table.columns
    assert "(450 GB/s)" in nvlink and "(50 GB/s)" in ib
    assert table.loc["hidden in forward", nvlink] == "yes" and table.loc["hidden in forward", ib].startswith("no, ")
    assert table.loc["ZeRO-3 sends", ib].endswith("(1.5× DDP)")
    assert len(costmodel.example(cfg, 8, 8 * 1024, busbw_here=12.5).table().columns) == 3  # this machine's link too
