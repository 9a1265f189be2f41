"""The FLOP-counting package's edges: lab 02's step-MFU check on answers a learner gets wrong,
refusals of impossible inputs, and the counter's read-outs."""

import pytest
import torch

from perflab.core.errors import InputError
from perflab.core.grading import LabCheckError
from perflab.flops import lab02 as lab
from perflab.flops import mfu
from perflab.flops.counter import count_flops
from perflab.flops.transformer import exact_flops, handbook_tflops_estimate, narayanan_training_days
from perflab.workload.models import preset

S, TPS, PEAK = 64, 12345.0, 0.2


def _want():
    ex = exact_flops(preset("tiny-gpt"), 1, S)
    return TPS * ex.model / S / (PEAK * 1e12)


def _check(value, **kw):
    return lab.check_step_mfu(value, tokens_per_s=TPS, model=kw.pop("model", "tiny-gpt"), seq=S, peak_tflops=PEAK, **kw)


def test_step_mfu_names_a_forward_only_count_and_a_missing_peak():
    with pytest.raises(LabCheckError, match="forward's FLOPs only"):
        _check(_want() / 3)
    with pytest.raises(LabCheckError, match="peak is missing from the denominator"):
        _check(_want() * PEAK)


def test_step_mfu_refuses_text_and_an_unknown_model():
    with pytest.raises(LabCheckError, match="expected a number .* got 'five percent'"):
        _check("five percent")
    with pytest.raises(LabCheckError, match="no-such-model"):
        _check(0.01, model="no-such-model")


def test_published_run_lookups_name_the_known_runs():
    ids = [r["id"] for r in mfu.published_runs()]
    with pytest.raises(InputError, match=f"unknown run 'gpt-5': use one of {ids[0]}"):
        mfu.run_description("gpt-5")
    described = [r for r in mfu.published_runs() if "describe" in r]
    assert described and mfu.run_description(described[0]["id"]) == described[0]["describe"]
    bare = [r["id"] for r in mfu.published_runs() if "describe" not in r]
    for rid in bare:
        with pytest.raises(InputError, match="no checklist description"):
            mfu.run_description(rid)


def test_time_estimates_refuse_zero_gpus():
    with pytest.raises(InputError, match="gpus and tflops_per_gpu must be > 0"):
        narayanan_training_days(3e11, 1.75e11, 0, 140)
    with pytest.raises(InputError, match="seconds per iteration and number of GPUs must be > 0"):
        handbook_tflops_estimate(175, 2048, 1536, 0.0, 1024)


def test_exact_count_per_token_and_hardware():
    ex = exact_flops(preset("tiny-gpt"), 2, S, checkpointing=True)
    assert ex.per_token() == ex.model / ex.tokens
    assert ex.per_token("hardware") == ex.hardware / ex.tokens > ex.per_token()


def test_counter_read_outs_agree():
    lin = torch.nn.Linear(8, 4, bias=False)
    c = count_flops(lambda: lin(torch.ones(3, 8)).sum().backward())
    assert c.by_phase["forward"] == 2 * 3 * 8 * 4
    assert c.hardware == c.total and c.model == c.by_phase["forward"] + c.by_phase["backward"]
    d = c.as_dict()
    assert d["total"] == c.total and d["by_phase"]["forward"] == 2 * 3 * 8 * 4 and "other_estimate" in d
    html = c._repr_html_()
    assert html.startswith(f"<p>{c}</p>") and "<table" in html
