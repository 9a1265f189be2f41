"""The arithmetic behind the vocab64 and checkpoint rungs' explanations."""

import pytest

from perflab.core.errors import InputError
from perflab.flops.transformer import exact_flops
from perflab.tune import ladder, rungmath
from perflab.workload.models import preset


def test_padding_gpt2_vocab_keeps_tile_counts_and_aligns_rows():
    p = rungmath.vocab_padding(50257, 64)
    assert p["padded"] == 50304
    assert p["tiles"] == {64: (786, 786), 128: (393, 393), 256: (197, 197)}
    assert p["tiles_unchanged"]
    assert p["row_bytes"] == (100514, 100608)
    assert p["aligned"] == (False, True)


def test_padding_can_change_tiles_for_other_sizes():
    p = rungmath.vocab_padding(129, 64, widths=(128,))
    assert p["tiles"][128] == (2, 2) and p["padded"] == 192
    p = rungmath.vocab_padding(100, 64, widths=(64,))
    assert p["tiles"][64] == (2, 2)
    # fp32 rows of an odd size are not 16-byte aligned either; a multiple of 4 values is
    assert rungmath.vocab_padding(50257, 64, itemsize=4)["aligned"] == (False, True)
    assert rungmath.vocab_padding(64, 64)["extra"] == 0


def test_padding_rejects_bad_input():
    with pytest.raises(InputError):
        rungmath.vocab_padding(0, 64)
    with pytest.raises(InputError):
        rungmath.vocab_padding(50257, -1)


def test_checkpoint_costs_less_than_a_third_of_the_step_for_gpt2_small():
    cfg = preset("gpt2-small")
    c = rungmath.checkpoint_cost(cfg, 1, 1024)
    assert c.naive_step_increase == pytest.approx(1 / 3)
    assert 0.15 < c.step_increase < 0.20  # the LM head (and each block's last product) are not recomputed
    assert c.step_increase < c.naive_step_increase
    assert 0.2 < c.logits_share < 0.35
    plain, ck = exact_flops(cfg, 1, 1024), exact_flops(cfg, 1, 1024, checkpointing=True)
    assert c.step_increase == pytest.approx(ck.hardware / plain.hardware - 1)
    assert c.recompute_over_forward * plain.forward_total == pytest.approx(ck.recompute_total - plain.recompute_total)


def test_rung_texts_follow_the_arithmetic():
    why = ladder.rung("vocab64").why
    assert "does not fill whole tiles" in why and "16 bytes" in why and "50,257" in why
    assert "third more forward" not in ladder.rung("checkpoint").why
    assert "step" in ladder.rung("checkpoint").why


def test_a_rung_is_adopted_only_above_two_percent():
    from perflab.tune import verdict

    assert verdict.ADOPT_MIN_GAIN == 0.02
    assert "2 %" in ladder.__doc__



def test_gpt2_small_pays_about_17_percent_per_step_for_full_checkpointing():
    r = rungmath.checkpoint_cost("gpt2-small")
    assert r.seq == 1024 and r.step_increase == pytest.approx(0.1729, abs=5e-4)
    assert "logits" in r.not_recomputed and "mlp_down" in r.not_recomputed  # torch stops early
    # the extra is exactly the blocks' forward products up to the last saved tensor
    cfg = preset("gpt2-small")
    from perflab.flops.transformer import layer_forward

    layer = layer_forward(cfg, 1, 1024)
    assert r.extra_flops == cfg.layers * (sum(layer.values()) - layer["mlp_down"])
    assert r.step_flops == exact_flops(cfg, 1, 1024).hardware
    whole = rungmath.checkpoint_cost(cfg, early_stop=False)
    assert whole.extra_flops == cfg.layers * sum(layer.values()) and r.step_increase < whole.step_increase < 1 / 3
    assert r.recompute_over_forward < 1  # less than one more forward: the LM head is not recomputed


def test_the_lessons_arithmetic_for_gpt2_small_in_words():
    from perflab.tune.ladder import preset as tune_preset

    cfg = tune_preset("gpu").cfg
    lines = rungmath.explain(cfg).splitlines()
    pad, ck = rungmath.vocab_padding(cfg.vocab, 64), rungmath.checkpoint_cost(cfg, 1, cfg.seq_len)
    assert lines[0] == "vocabulary 50,257 → 50,304 (+0.09% columns)"
    assert [ln.strip() for ln in lines[1:4]] == [f"{w}-wide tiles across it: {a} → {b}" for w, (a, b) in pad["tiles"].items()]
    assert lines[4].strip() == "one bf16 row: 100,514 → 100,608 bytes; a multiple of 16 bytes: False → True"
    assert lines[5].startswith(f"full checkpointing, {cfg.name} at sequence 1024: recomputes "
                               f"{ck.recompute_over_forward:.0%} of a forward, {ck.step_increase:+.0%} FLOPs per step")
