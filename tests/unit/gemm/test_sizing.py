"""Tests of `perflab.gemm.sizing`: the model-sizing checklist."""

from __future__ import annotations

import pytest

from perflab.core.errors import InputError
from perflab.course.reference import published
from perflab.gemm import sizing


def test_checklist_flags_a_swiglu_width_off_the_multiple_of_64():
    item = sizing.sizing_checklist(vocab=50304, b=8, s=2048, h=4096, a=32, d_ff=11000)[-1]
    assert item.rule == "SwiGLU d_ff a multiple of 64 near 8/3·h" and item.ok is False
    assert item.detail == ("d_ff = 11000 (2.686·h) is divisible only by 8: measure 10944 and 11008 with "
                           "`perflab swiglu --hidden 4096`")


def test_sizing_checklist_on_published_configs():
    cfgs = {r["model"]: r for r in published("model_configs")["rows"]}
    gpt2 = cfgs["GPT-2 (124M)"]
    items = {i.rule.split(" ")[0]: i for i in sizing.sizing_checklist(vocab=gpt2["vocab"], b=8, s=1024,
                                                                       h=gpt2["hidden"], a=gpt2["heads"])}
    assert items["vocab"].ok is False and "50304" in items["vocab"].detail  # 50257 → pad to 50304
    assert items["h/a"].ok is True  # 768/12 = 64
    gpt3 = cfgs["GPT-3 2.7B"]
    ha = [i for i in sizing.sizing_checklist(vocab=50304, b=1, s=2048, h=gpt3["hidden"], a=gpt3["heads"])
          if i.rule.startswith("h/a")][0]
    assert ha.ok is False and "80" in ha.detail  # the paper's slow example: d_head 80
    llama = cfgs["Llama-2-7B"]
    res = sizing.sizing_checklist(vocab=llama["vocab"], b=1, s=4096, h=llama["hidden"], a=llama["heads"], t=8,
                                  d_ff=llama["d_ff"])
    # every shape passes but the vocabulary: 32000/8 = 4000 columns per tensor-parallel rank is not a multiple of 64
    assert [i.rule for i in res if i.ok is False] == ["vocab % (64·t) == 0"], sizing.checklist_text(res)
    one = sizing.sizing_checklist(vocab=llama["vocab"], b=1, s=4096, h=llama["hidden"], a=llama["heads"], t=1)
    assert all(i.ok is not False for i in one), sizing.checklist_text(one)


@pytest.mark.parametrize("vocab, t, ok, padded", [
    (50304, 1, True, None), (50257, 1, False, 50304),  # no tensor parallelism: V % 64
    (50304, 2, True, None),  # 25152 = 64 × 393 per rank
    (32000, 8, False, 32256),  # 4000 per rank: a multiple of 32, not of 64
    (50257, 8, False, 50688),  # not even whole per rank
    (32768, 8, True, None), (51200, 8, True, None),
])
def test_vocab_rule_with_tensor_parallelism(vocab, t, ok, padded):
    """A vocab-parallel output layer gives each of the t ranks n = V/t columns, so V % (64·t) == 0; Megatron-LM
    pads the vocabulary to a multiple of 128·t (`_vocab_size_with_padding`)."""
    item = sizing.vocab_item(vocab, t)
    assert item.ok is ok and item.rule == ("vocab % 64 == 0" if t == 1 else "vocab % (64·t) == 0")
    assert ok == (vocab % 64 == 0 and (vocab // t) % 64 == 0 and vocab % t == 0)
    if padded:
        assert f"pad V to {padded}" in item.detail or f"pad the vocabulary to {padded}" in item.detail
        assert padded % (64 * t) == 0 and padded - vocab < 64 * t
    if not ok and t > 1:
        megatron = sizing.pad_to_multiple(vocab, 128 * t)
        assert f"Megatron-LM pads to {megatron} (128·t)" in item.detail and megatron % (128 * t) == 0
    assert sizing.sizing_checklist(vocab=vocab, b=1, s=64, h=64 * t, a=t, t=t)[0] == item


def test_checklists_over_published_configs_name_each_failure():
    configs = published("model_configs")["rows"]
    checks = sizing.checklists(configs, b=4, s=2048, t=8)
    table = checks.table()
    assert list(table.index.names) == ["model", "check"] and list(table.columns) == ["verdict", "why"]
    assert "note" not in set(table["verdict"]) and "note" in set(checks.table(notes=True)["verdict"])
    assert checks.failed("Llama-2-7B") == ["vocab % (64·t) == 0"]
    assert checks.failed("GPT-3 2.7B") == ["vocab % (64·t) == 0", "h/a divisible by 64"]
    assert sizing.checklists(configs, b=4, s=2048, t=1).failed("Llama-2-7B") == []


def test_sizing_checklist_failures_say_why():
    res = {i.rule: i for i in sizing.sizing_checklist(vocab=32000, b=3, s=1000, h=4096, a=24, t=16)}
    assert res["b·s divisible by 64"].ok is False and "8" in res["b·s divisible by 64"].detail
    assert res["h/a divisible by 64"].ok is False and "not divisible by a=24" in res["h/a divisible by 64"].detail
    assert res["(b·a)/t is an integer"].ok is False  # 72/16
    assert res["t small (≤ 8)"].ok is False
    with pytest.raises(InputError):
        sizing.sizing_checklist(vocab=0, b=1, s=1, h=1, a=1)
    with pytest.raises(InputError):
        sizing.sizing_checklist(vocab=64, b=1, s=64, h=64, a=1, pow2=48)


def test_largest_pow2_and_padding():
    assert sizing.largest_pow2_divisor(10922) == 2
    assert sizing.largest_pow2_divisor(11008) == 256
    assert sizing.pad_to_multiple(50257, 64) == 50304
