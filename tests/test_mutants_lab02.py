"""Lab 02's checks reject the mistakes learners make, each with a hint that names it, and pass the
reference solution (labs/solutions/02_mfu.ipynb). The timing check is covered in test_lab02.py."""

import pytest

from perflab.core import grading
from perflab.core.grading import LabCheckError
from perflab.flops import lab02 as lab
from perflab.flops.transformer import exact_flops
from perflab.workload.models import preset


def setup_function():
    grading.reset()


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


@pytest.mark.parametrize(("check", "mutant", "keyword"), MUTANTS, ids=[m.__name__ for _c, m, _k in MUTANTS])
def test_mutant_is_rejected_with_a_hint_naming_the_mistake(check, mutant, keyword):
    with pytest.raises(LabCheckError, match="Hint") as err:
        check(mutant)
    assert keyword in str(err.value), str(err.value)


STEP = dict(tokens_per_s=5000.0, model="tiny-gpt", seq=64, peak_tflops=2.0)


def _step_values():
    ex = exact_flops(preset("tiny-gpt"), 1, 64)
    return mfu(5000.0, ex.model / 64, 1, 2.0), mfu(5000.0, ex.hardware / 64, 1, 2.0)


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
