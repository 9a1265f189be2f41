"""perflab.shard.formulas: the bubble in both conventions and under interleaving, the point-to-point
sends interleaving costs, and tensor parallelism's collectives per training step."""

import pytest

from perflab.core.errors import InputError
from perflab.shard import formulas as F
from perflab.workload.models import preset


def test_megatron_bubble_time_fraction_and_the_whole_step_fraction():
    # Narayanan et al. 2021 §2.2.1: (p − 1)/m, idle over ideal time; GPipe: (p − 1)/(m + p − 1)
    assert F.bubble_ratio(4, 8) == pytest.approx(3 / 8)
    assert F.bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert F.step_fraction_from_ratio(3 / 8) == pytest.approx(3 / 11)
    assert F.ratio_from_step_fraction(0.0) == 0.0
    with pytest.raises(InputError, match=r"\[0, 1\)"):
        F.ratio_from_step_fraction(1.0)


def test_interleaving_divides_the_bubble_by_v_and_multiplies_the_sends():
    p, m = 8, 32
    assert F.bubble_ratio(p, m, v=2) == pytest.approx(F.bubble_ratio(p, m) / 2)
    assert F.interleaved_bubble_fraction(p, m, 1) == pytest.approx(F.bubble_fraction(p, m))
    assert F.interleaved_bubble_fraction(p, m, 4) < F.interleaved_bubble_fraction(p, m, 2) < F.bubble_fraction(p, m)
    # every micro-batch crosses v·p − 1 boundaries each way: (v·p − 1)/(p − 1) ≈ v times as many sends
    assert F.p2p_sends(p, m) == 2 * m * 7 and F.p2p_sends(p, m, v=2) == 2 * m * 15
    assert F.p2p_sends(2, 4, v=3) / F.p2p_sends(2, 4) == 5
    with pytest.raises(InputError, match="chunks per device"):
        F.bubble_ratio(4, 8, v=0)


def test_tensor_parallel_step_has_four_all_reduces_per_block_and_sequence_parallel_swaps_each():
    cfg = preset("tiny-gpt")
    t = F.tp_comm(cfg, 2, batch=2, seq=32)
    per = 2 * 32 * cfg.hidden * 4
    assert t["calls_per_block"] == 4 and t["calls"] == 4 * cfg.layers and t["bytes"] == t["calls"] * per
    assert t["forward"]["calls_per_block"] == t["backward"]["calls_per_block"] == 2
    sp = t["sequence_parallel"]
    assert sp["reduce_scatter"]["calls"] == sp["all_gather"]["calls"] == t["calls"]
    assert F.tp_comm(cfg, 1, batch=2, seq=32)["calls"] == 0


def test_torchtitans_interleaved_gain_is_computed_from_its_table():
    from perflab.shard import published

    g = published.interleaved_1f1b_gain()
    assert g["tokens_per_s_per_gpu"] == {"1F1B": 100.0, "Interleaved 1F1B": 128.0}
    assert g["throughput_gain"] == pytest.approx(0.28) and g["memory_change"] < 0
    assert "Table 5" in g["source"] and "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a" in g["source"]


def test_fsdp_peak_holds_two_units_of_parameters_and_one_of_gradients():
    cfg = preset("tiny-gpt")
    m = F.fsdp_peak_unsharded(cfg, 2)
    units = {u.name: u.padded_numel(2) * 4 for u in F.fsdp_units(cfg)}
    assert m["units"] == ["root", "blocks.0"] and m["unit_bytes"] == units
    assert m["params"] == units["root"] + units["blocks.0"] and m["grads"] == units["blocks.0"]
    assert m["total"] == m["params"] + m["grads"]
