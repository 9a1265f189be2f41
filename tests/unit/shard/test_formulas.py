"""perflab.shard.formulas: the bubble in both conventions and under interleaving, the point-to-point
sends interleaving costs, and tensor parallelism's collectives per training step.
"""

import json

import pytest
from clirun import perflab

from perflab.core.errors import InputError
from perflab.core.jsonable import to_json
from perflab.shard import formulas as F
from perflab.shard import published
from perflab.workload.models import preset


def test_bubble_formula_and_held_microbatches():
    assert F.bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert F.bubble_fraction(2, 1) == 0.5 and F.bubble_fraction(1, 5) == 0.0
    assert [F.in_flight_microbatches("gpipe", 4, 8, s) for s in range(4)] == [8] * 4
    assert [F.in_flight_microbatches("1f1b", 4, 8, s) for s in range(4)] == [4, 3, 2, 1]
    with pytest.raises(InputError, match="gpipe or 1f1b"):
        F.check_schedule("zb")


def test_replay_gives_the_formula_for_equal_stages_and_shows_an_unequal_one():
    for p, m in ((2, 1), (2, 8), (4, 4), (3, 5)):
        gpipe = [[("F", 1.0)] * m + [("B", 2.0)] * m for _ in range(p)]
        assert F.replay(gpipe).bubble == pytest.approx([F.bubble_fraction(p, m)] * p)
    slow = [[("F", 1.0)] * 4 + [("B", 2.0)] * 4, [("F", 2.0)] * 4 + [("B", 2.0)] * 4]
    r = F.replay(slow)
    assert r.wall_s == pytest.approx(1 + 4 * 2 + 4 * 2 + 2)  # the slow stage sets the pace
    with pytest.raises(InputError, match="deadlock"):
        F.replay([[("B", 1.0), ("F", 1.0)], [("F", 1.0), ("B", 1.0)]])


def test_fsdp_memory_names_uneven_shards_and_step_counters():
    cfg = preset("tiny-gpt")
    m = F.fsdp_memory(cfg, 3, rank=2)  # 1024-row embedding over 3 ranks: 342, 342, 340 rows
    assert F.shard_rows(1024, 3, 2) == 340 and F.shard_rows(5, 4, 3) == 0
    assert m.exact.param == F.fsdp_param_shard_bytes(cfg, 3, 2)
    assert m.exact.param - m.estimate.param == pytest.approx(m.named["uneven dim-0 shards (params)"])
    assert m.named["AdamW step counters (one fp32 per tensor)"] == 4 * len(list(__import__(
        "perflab.workload.models", fromlist=["x"]).build_model(cfg).parameters()))
    for n in (2, 4):  # lesson 12: tiny-gpt's dimensions divide by 2 and by 4
        assert all(F.fsdp_memory(cfg, n, r).named["uneven dim-0 shards (params)"] == 0 for r in range(n))
    ranks = [F.fsdp_param_shard_bytes(cfg, 3, r) for r in range(3)]
    assert sum(ranks) == 4 * F.fsdp_units(cfg)[0].numel + 4 * sum(u.numel for u in F.fsdp_units(cfg)[1:])


def test_fsdp_and_tp_collective_formulas():
    cfg = preset("tiny-gpt")
    c = F.fsdp_comm(cfg, 2)
    root, block = 4 * (1024 * 128 + 128 * 128 + 256), 4 * (4 * (128 * 128 + 128) + 2 * 128 * 512 + 512 + 128 + 4 * 128)
    assert c.all_gather == F.CommCount(1 + 2 * 2, root + 2 * 2 * block)
    assert c.reduce_scatter == F.CommCount(3, root + 2 * block)
    assert (c.calls, c.bytes) == (5 + 3, 2 * root + 6 * block) and c.of("reduce_scatter") is c.reduce_scatter
    t = F.tp_comm(cfg, 2, batch=2, seq=32)
    per = 2 * 32 * 128 * 4
    assert (t.calls, t.calls_per_block, t.bytes, t.bytes_per_call) == (8, 4, 8 * per, per)
    assert t.forward == t.backward == F.TpCalls(4, 2, 4 * per)
    assert to_json(t.forward) == {"calls": 4, "calls_per_block": 2, "bytes": 4 * per}
    with pytest.raises(InputError, match="--nproc among"):
        F.check_tp(cfg, 3)


@pytest.mark.parametrize("args, needle", [
    (["--strategy", "pp", "--nproc", "1"], "at least 2 stages"),
    (["--strategy", "pp", "--nproc", "4", "--schedule", "1f1b", "--microbatches", "2"], "1F1B needs"),
    (["--strategy", "tp", "--nproc", "3"], "--nproc among"),
    (["--strategy", "fsdp", "--preset", "gpt9"], "unknown preset"),
    (["--strategy", "pp", "--microbatches", "0"], "must be ≥ 1"),
])
def test_cli_refuses_bad_input_in_one_line(args, needle):
    r = perflab("shard", *args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_ranks_that_do_not_finish_are_reported_and_stopped():
    r = perflab("shard", "--strategy", "pp", "--nproc", "2", "--timeout", "2", "--json")
    assert r.returncode == 1 and "did not finish within 2 s" in r.stderr and "Traceback" not in r.stderr
    d = json.loads(r.stdout)
    assert not d["ok"] and d["rows"] == [] and "every process was stopped" in d["checks"][0]["measured"]


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
    assert t.calls_per_block == 4 and t.calls == 4 * cfg.layers and t.bytes == t.calls * per
    assert t.forward.calls_per_block == t.backward.calls_per_block == 2
    sp = t.sequence_parallel
    assert sp.reduce_scatter.calls == sp.all_gather.calls == t.calls
    assert F.tp_comm(cfg, 1, batch=2, seq=32).calls == 0
    assert t.describe(2, 32).splitlines() == [
        f"formula, one training step: 2 all-reduces per block in the forward + 2 in the backward = 4 × {cfg.layers} "
        f"blocks = {t.calls}, {per / 1e3:.1f} kB each (b·s·h·4 bytes, b = 2, s = 32)",
        f"with sequence parallelism instead: {t.calls} reduce-scatters + {t.calls} all-gathers of the same b·s·h tensors"]


def test_torchtitans_interleaved_gain_is_computed_from_its_table():

    g = published.interleaved_1f1b_gain()
    assert g.tokens_per_s_per_gpu == {"1F1B": 100.0, "Interleaved 1F1B": 128.0}
    assert g.throughput_gain == pytest.approx(0.28) and g.memory_change < 0
    assert "Table 5" in g.source and "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a" in g.source


def test_fsdp_peak_holds_two_units_of_parameters_and_one_of_gradients():
    cfg = preset("tiny-gpt")
    m = F.fsdp_peak_unsharded(cfg, 2)
    units = {u.name: u.padded_numel(2) * 4 for u in F.fsdp_units(cfg)}
    assert m.units == ["root", "blocks.0"] and m.unit_bytes == units
    assert m.params == units["root"] + units["blocks.0"] and m.grads == units["blocks.0"]
    assert m.total == m.params + m.grads
