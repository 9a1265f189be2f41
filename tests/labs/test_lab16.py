"""Lab 16's grader: the reference rowwise quantizer passes, each plausible mistake is rejected with a hint
that names it, and what the judge reads back (tensors through JSON) grades the same."""

import functools
import math
import random

import pytest
import torch

from perflab.grading.checks import LabCheckError
from perflab.numerics import lab16

# The solution and its mutants live here, not in the package, so that the learners' release holds no answer.


def solution_quantize(x, fp8_dtype, *, _mutant: str = ""):
    fmax = torch.finfo(fp8_dtype if _mutant != "e5m2" else torch.float8_e5m2).max
    xf = x.float()
    mag = torch.where(torch.isfinite(xf), xf.abs(), torch.zeros_like(xf))
    if _mutant == "tensorwise":
        amax = mag.amax().reshape(1, 1)
    elif _mutant == "mean":
        amax = mag.mean(dim=-1, keepdim=True)
    elif _mutant == "amax_with_inf":
        amax = xf.abs().amax(dim=-1, keepdim=True)
    else:
        amax = mag.amax(dim=-1, keepdim=True)
    if _mutant != "no_floor":
        amax = amax.clamp(min=1e-12)
    scale = fmax / amax
    scaled = xf * scale
    if _mutant != "no_saturation":
        scaled = scaled.clamp(-fmax, fmax)
    if _mutant == "nan_to_zero":
        scaled = torch.nan_to_num(scaled, nan=0.0)
    return scaled.to(fp8_dtype if _mutant != "e5m2" else torch.float8_e5m2), scale


def solution_dequantize(q, scale):
    return q.float() / scale


def solution_linear(x, w, *, _quantize=solution_quantize, _dtype=torch.float8_e4m3fn, _exact=False):
    if _exact:
        return x @ w.t()
    qx, sx = _quantize(x, _dtype)
    qw, sw = _quantize(w, _dtype)
    return (qx.float() @ qw.float().t()) / (sx * sw.t())


def no_saturation_quantize(x, fp8_dtype):
    """The mutant without the clamp, and with a cast that does not saturate either (older torch's E4M3
    gives NaN past 448; E5M2 gives inf everywhere): so that the mutant fails on every torch version."""
    q, scale = solution_quantize(x, fp8_dtype, _mutant="no_saturation")
    xs = x.float() * scale
    fmax = torch.finfo(fp8_dtype).max
    over = ~(xs.abs() <= fmax) & ~torch.isnan(xs)
    if fp8_dtype == torch.float8_e4m3fn:
        q = torch.where(over, torch.full_like(xs, math.nan), q.float()).to(fp8_dtype)
    return q, scale


MUTANTS = {  # name -> (quantize, dequantize, linear)
    "tensorwise": (functools.partial(solution_quantize, _mutant="tensorwise"), solution_dequantize, solution_linear),
    "no_saturation": (no_saturation_quantize, solution_dequantize, solution_linear),
    "mean": (functools.partial(solution_quantize, _mutant="mean"), solution_dequantize, solution_linear),
    "e5m2_forward": (solution_quantize, solution_dequantize,
                     functools.partial(solution_linear, _dtype=torch.float8_e5m2)),
    # the edges the brief names besides the four wrong answers
    "no_floor": (functools.partial(solution_quantize, _mutant="no_floor"), solution_dequantize, solution_linear),
    "amax_with_inf": (functools.partial(solution_quantize, _mutant="amax_with_inf"), solution_dequantize, solution_linear),
    "nan_to_zero": (functools.partial(solution_quantize, _mutant="nan_to_zero"), solution_dequantize, solution_linear),
    "tensorwise_linear": (solution_quantize, solution_dequantize,
                          functools.partial(solution_linear, _quantize=functools.partial(solution_quantize,
                                                                                         _mutant="tensorwise"))),
    "exact_linear": (solution_quantize, solution_dequantize, functools.partial(solution_linear, _exact=True)),
}

HINTS = {
    "tensorwise": "tensorwise scaling",
    "no_saturation": "saturate before the cast",
    "mean": "mean |x|",
    "e5m2_forward": "E5M2",
    "no_floor": "all-zero row",
    "amax_with_inf": "finite values only",
    "nan_to_zero": "must stay NaN",
    "tensorwise_linear": "tensorwise scaling",
    "exact_linear": "more exact than fp8 allows",
}

FOUR = ("tensorwise", "no_saturation", "mean", "e5m2_forward")  # the wrong answers the lab's brief names


def test_every_mutant_has_its_hint():
    assert set(HINTS) == set(MUTANTS) and set(FOUR) <= set(MUTANTS)


def test_the_reference_solution_passes(capsys):
    assert lab16.check_rowwise(solution_quantize, solution_dequantize, solution_linear)
    assert "✓ rowwise fp8" in capsys.readouterr().out


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_mutant_is_rejected_with_the_hint_that_names_it(name):
    with pytest.raises(LabCheckError, match=HINTS[name]):
        lab16.check_rowwise(*MUTANTS[name])


def test_the_plain_torch_cast_without_a_clamp_is_rejected_where_it_matters():
    """Without the clamp, this torch's E4M3 cast happens to saturate, but E5M2 keeps inf: caught there."""
    with pytest.raises(LabCheckError, match="saturate before the cast"):
        lab16.check_rowwise(functools.partial(solution_quantize, _mutant="no_saturation"), solution_dequantize,
                            solution_linear)


def test_a_power_of_two_scale_and_the_inverse_convention_pass():
    def pow2(x, fp8_dtype):
        q, scale = solution_quantize(x, fp8_dtype)
        s2 = torch.exp2(torch.floor(torch.log2(scale)))
        fmax = torch.finfo(fp8_dtype).max
        return (x.float() * s2).clamp(-fmax, fmax).to(fp8_dtype), 1 / s2  # stores the dequantization scale

    assert lab16.check_quantizer(pow2, lambda q, s: q.float() * s)


def test_a_stub_is_not_done_yet(capsys):
    def stub(*args, **kwargs):
        raise NotImplementedError

    assert not lab16.check_rowwise(stub, stub, stub)
    assert "not done yet" in capsys.readouterr().out


def test_the_wrong_dtype_is_named():
    with pytest.raises(LabCheckError, match="fp8 dtype asked for"):
        lab16.check_quantizer(lambda x, dt: solution_quantize(x, torch.float8_e5m2), solution_dequantize)


def test_the_hidden_tensors_hold_every_edge():
    x = lab16.make_case(lab16.CASES[3])
    assert torch.isinf(x).sum() == 2 and torch.isnan(x).sum() == 1
    z = lab16.make_case(lab16.CASES[2])
    assert (z == 0).all(dim=-1).any() and ((z.abs() < 1e-38) & (z != 0)).any()


def _as_json(x):
    """An answer as the grader's worker sends it back: a tensor as its dtype's name, shape and values in
    JSON (inf and NaN as text), and read back into a tensor of that dtype."""
    import json

    if isinstance(x, (tuple, list)):
        return type(x)(_as_json(v) for v in x)
    t = x.detach()
    text = json.dumps({"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                       "data": [v if math.isfinite(v) else repr(v) for v in t.reshape(-1).tolist()]})
    d = json.loads(text)
    return torch.tensor([float(v) for v in d["data"]], dtype=getattr(torch, d["dtype"])).reshape(d["shape"])


def _through_json(fn):
    return lambda *args, **kwargs: _as_json(fn(*args, **kwargs))


def test_the_judge_grades_the_solution_on_drawn_inputs_through_json():
    answers = {"quantize_rowwise": _through_json(solution_quantize), "dequantize_rowwise": _through_json(solution_dequantize),
               "fp8_linear": _through_json(solution_linear)}
    lab16.judge(answers, random.Random(5))
    answers["quantize_rowwise"] = _through_json(functools.partial(solution_quantize, _mutant="mean"))
    with pytest.raises(LabCheckError, match="mean"):
        lab16.judge(answers, random.Random(5))


def test_the_grading_inputs_differ_per_draw():
    a, b = lab16.grading_inputs(random.Random(1)), lab16.grading_inputs(random.Random(2))
    assert a != b and len(a["cases"]) == 4 and all(c["dtype"] in ("e4m3", "e5m2") for c in a["cases"])
