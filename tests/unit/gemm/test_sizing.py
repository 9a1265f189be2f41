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
    assert all(i.ok is not False for i in res), sizing.checklist_text(res)


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
