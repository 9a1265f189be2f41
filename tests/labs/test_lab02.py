"""Lab 02: its checks accept the reference answer and reject each plausible mistake with a hint."""

from __future__ import annotations

import pytest
import torch

from perflab.flops import lab02
from perflab.flops import lab02 as lab
from perflab.flops.transformer import exact_flops
from perflab.grading import checks as grading
from perflab.grading.checks import LabCheckError
from perflab.workload.models import preset

S, TPS, PEAK = 64, 12345.0, 0.2


def _check(value, **kw):
    return lab.check_step_mfu(value, tokens_per_s=TPS, model=kw.pop("model", "tiny-gpt"), seq=S, peak_tflops=PEAK, **kw)


def right_palm(n_params, layers, heads, head_dim, seq):
    return 6 * n_params + 12 * layers * heads * head_dim * seq


def right_mfu(tokens_per_s, flops_per_token, n_devices, peak_tflops):
    return tokens_per_s * flops_per_token / (n_devices * peak_tflops * 1e12)


def stub(*args, **kwargs):
    raise NotImplementedError


def palm(n_params, layers, heads, head_dim, seq):
    return 6 * n_params + 12 * layers * heads * head_dim * seq


def mfu(tokens_per_s, flops_per_token, n_devices, peak_tflops):
    return tokens_per_s * flops_per_token / (n_devices * peak_tflops * 1e12)


def palm_no_attention(n_params, layers, heads, head_dim, seq):  # a missing term
    return 6 * n_params


def palm_forward_only(n_params, layers, heads, head_dim, seq):  # wrong convention: inference FLOPs
    return 2 * n_params + 4 * layers * heads * head_dim * seq


def palm_six_not_twelve(n_params, layers, heads, head_dim, seq):  # off by a factor in one term
    return 6 * n_params + 6 * layers * heads * head_dim * seq


def palm_ignores_heads(n_params, layers, heads, head_dim, seq):  # ignores an input (assumes 128-wide heads × 8)
    return 6 * n_params + 12 * layers * 1024 * seq


def palm_visible_example(n_params, layers, heads, head_dim, seq):  # special-cased to PaLM 540B
    return 6 * n_params + 12 * 118 * 48 * 256 * 2048 if n_params > 5e11 else 6 * n_params


def mfu_percent(tokens_per_s, flops_per_token, n_devices, peak_tflops):  # wrong unit
    return 100 * mfu(tokens_per_s, flops_per_token, n_devices, peak_tflops)


def mfu_no_devices(tokens_per_s, flops_per_token, n_devices, peak_tflops):  # ignores an input
    return tokens_per_s * flops_per_token / (peak_tflops * 1e12)


def mfu_tera_forgotten(tokens_per_s, flops_per_token, n_devices, peak_tflops):  # forgets 1e12
    return tokens_per_s * flops_per_token / (n_devices * peak_tflops)


def mfu_calls_perflab(tokens_per_s, flops_per_token, n_devices, peak_tflops):  # perflab computes it
    from perflab.flops.mfu import mfu as theirs

    return theirs(tokens_per_s, flops_per_token, peak_tflops, n_devices)


MUTANTS = [
    (lab.check_palm_flops, palm_no_attention, "attention term is missing"),
    (lab.check_palm_flops, palm_forward_only, "forward alone"),
    (lab.check_palm_flops, palm_six_not_twelve, "12·L·H·Q·T"),
    (lab.check_palm_flops, palm_ignores_heads, "ignores an input"),
    (lab.check_palm_flops, palm_visible_example, "fits only some"),
    (lab.check_mfu, mfu_percent, "percentage"),
    (lab.check_mfu, mfu_no_devices, "device count"),
    (lab.check_mfu, mfu_tera_forgotten, "1e12"),
    (lab.check_mfu, mfu_calls_perflab, "calls perflab"),
]


STEP = dict(tokens_per_s=5000.0, model="tiny-gpt", seq=64, peak_tflops=2.0)


def _step_values():
    ex = exact_flops(preset("tiny-gpt"), 1, 64)
    return mfu(5000.0, ex.model / 64, 1, 2.0), mfu(5000.0, ex.hardware / 64, 1, 2.0)


def test_lab02_mfu_check_reports_a_published_figure_the_inputs_do_not_reproduce(monkeypatch):
    original = lab02._palm_case

    def misprinted(run_id):
        run = original(run_id)
        if run_id == "palm-540b":
            run = {**run, "published": {**run["published"], "mfu": 0.471}}
        return run

    monkeypatch.setattr(lab02, "_palm_case", misprinted)

    def student(tokens_per_s, flops_per_token, n_devices, peak_tflops):
        return tokens_per_s * flops_per_token / (n_devices * peak_tflops * 1e12)

    with pytest.raises(LabCheckError, match="MFU from throughput: .*'n_devices': 6144, 'peak_tflops': 275.*\\} gives "
                                            "0.4623, the paper prints 0.471"):
        lab02.check_mfu(student)


def test_step_mfu_refuses_text_and_an_unknown_model():
    with pytest.raises(LabCheckError, match="expected a number .* got 'five percent'"):
        _check("five percent")
    with pytest.raises(LabCheckError, match="no-such-model"):
        _check(0.01, model="no-such-model")


def test_palm_flops():
    assert lab.check_palm_flops(right_palm)
    assert not lab.check_palm_flops(stub)
    with pytest.raises(LabCheckError, match="attention term"):
        lab.check_palm_flops(lambda n_params, **kw: 6 * n_params)


def test_mfu():
    assert lab.check_mfu(right_mfu)
    assert not lab.check_mfu(stub)
    with pytest.raises(LabCheckError):  # a percentage, not a fraction
        lab.check_mfu(lambda **kw: 100 * right_mfu(**kw))
    with pytest.raises(LabCheckError):  # forgot the number of devices
        lab.check_mfu(lambda tokens_per_s, flops_per_token, n_devices, peak_tflops: tokens_per_s * flops_per_token / (peak_tflops * 1e12))


def test_tokens_per_second():
    def written_out(model, batch, seq, steps, device=None):  # the solution notebook's timing loop
        import time

        from perflab.workload.models import build_model
        from perflab.workload.train import make_batches, next_token_loss

        cfg = preset(model)
        net = build_model(cfg)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        batches = make_batches(cfg, batch, seq, n=2)

        def step(x, y):
            next_token_loss(net(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step(*batches[0])
        t0 = time.perf_counter()
        for i in range(steps):
            step(*batches[i % 2])
        return batch * seq * steps / (time.perf_counter() - t0)

    assert lab.check_tokens_per_second(written_out, batch=2, seq=32, steps=2)
    assert not lab.check_tokens_per_second(stub)
    with pytest.raises(LabCheckError, match="much faster"):
        lab.check_tokens_per_second(lambda **kw: 1e12, batch=2, seq=32, steps=2)
    with pytest.raises(LabCheckError, match="positive number"):
        lab.check_tokens_per_second(lambda **kw: -5.0, batch=2, seq=32, steps=2)


def test_step_mfu_and_hfu():
    cfg, s, tps, peak = preset("tiny-gpt"), 64, 12345.0, 0.2
    ex = exact_flops(cfg, 1, s)
    m, h = tps * ex.model / s / (peak * 1e12), tps * ex.hardware / s / (peak * 1e12)
    assert lab.check_step_mfu(m, tokens_per_s=tps, model="tiny-gpt", seq=s, peak_tflops=peak)
    assert lab.check_step_mfu(h, tokens_per_s=tps, model="tiny-gpt", seq=s, peak_tflops=peak, kind="hfu")
    assert not lab.check_step_mfu(None, tokens_per_s=tps, model="tiny-gpt", seq=s, peak_tflops=peak)
    with pytest.raises(LabCheckError, match="that is the HFU"):
        lab.check_step_mfu(h, tokens_per_s=tps, model="tiny-gpt", seq=s, peak_tflops=peak)
    with pytest.raises(LabCheckError, match="fraction"):
        lab.check_step_mfu(100 * m, tokens_per_s=tps, model="tiny-gpt", seq=s, peak_tflops=peak)
    with pytest.raises(LabCheckError, match="expected"):
        lab.check_step_mfu(2 * m, tokens_per_s=tps, model="tiny-gpt", seq=s, peak_tflops=peak)


def test_summary_requires_all():
    lab.check_palm_flops(stub)
    with pytest.raises(LabCheckError):
        grading.summary(require_all=True)


@pytest.mark.parametrize(("check", "mutant", "keyword"), MUTANTS, ids=[m.__name__ for _c, m, _k in MUTANTS])
def test_mutant_is_rejected_with_a_hint_naming_the_mistake(check, mutant, keyword):
    with pytest.raises(LabCheckError, match="Hint") as err:
        check(mutant)
    assert keyword in str(err.value), str(err.value)


@pytest.mark.parametrize(("transform", "keyword"), [
    (lambda m, h: 100 * m, "fraction"),
    (lambda m, h: h, "HFU"),
    (lambda m, h: m / 3, "forward"),
])
def test_step_mfu_mutants(transform, keyword):
    m, h = _step_values()
    if m == h and keyword == "HFU":
        pytest.skip("this model recomputes nothing")
    with pytest.raises(LabCheckError, match="Hint") as err:
        lab.check_step_mfu(transform(m, h), **STEP)
    assert keyword in str(err.value)


def test_reference_solution_passes():
    m, h = _step_values()
    assert lab.check_palm_flops(palm) and lab.check_mfu(mfu)
    assert lab.check_step_mfu(m, **STEP) and lab.check_step_mfu(h, kind="hfu", **STEP)


def test_timing_by_calling_perflab_is_refused():
    from perflab.flops.step import measure_step

    def tokens_per_second(model, batch, seq, steps, device=None):
        return measure_step(preset(model), batch=batch, seq=seq, steps=steps, warmup=1, ceiling=False,
                            verify=False).tokens_per_s

    with pytest.raises(LabCheckError, match="calls perflab"):
        lab.check_tokens_per_second(tokens_per_second, batch=2, seq=16, steps=1)
