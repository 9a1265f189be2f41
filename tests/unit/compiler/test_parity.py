"""Tests of `perflab.compiler.parity`."""

from __future__ import annotations

import pytest
import torch

from perflab.compiler import models, parity
from perflab.core.errors import InputError

from .helpers import _ids


@pytest.mark.slow
def test_parity_passes_same_model_and_flags_a_bf16_cast():
    m = models.FixedLM(seed=3)
    bs = [(_ids(), _ids()) for _ in range(2)]
    same = parity.check(m, bs, 3, compile_kw={"backend": "aot_eager"})
    assert same.ok and same.max_rel <= 1e-4
    bad = parity.check(m, bs, 3, compile_kw={"backend": "aot_eager"}, unsafe=True)
    assert not bad.ok and bad.max_rel > 10 * same.tol


def test_tolerance_follows_dtype_epsilon():
    # fp32 eps 2^-23; bf16 eps 2^-7 (IEEE 754 / bfloat16 format): the tolerance is far above each
    assert parity.tolerance(torch.float32) > 100 * torch.finfo(torch.float32).eps
    assert parity.tolerance(torch.bfloat16) > torch.finfo(torch.bfloat16).eps
    assert parity.tolerance(torch.float32) < torch.finfo(torch.bfloat16).eps


def test_loss_curve_plot_labels_its_axes():
    from perflab.compiler import plots

    par = parity.Parity([2.0, 1.5], [2.0, 1.5001], [0.0, 1e-4], [0.0, 6.7e-5], 1e-4)
    fig = plots.loss_curves(par)
    left, right = fig.axes
    assert "loss" in left.get_ylabel() and "step" in left.get_xlabel() and "relative" in right.get_ylabel()
    assert len(left.get_lines()) == 2


def test_parity_record_and_a_wrong_length_of_eager_losses():
    p = parity.Parity([2.0, 1.0], [2.0, 1.5], [0.0, 0.5], [0.0, 0.5], 1e-4)
    assert p.as_dict() == {"eager": [2.0, 1.0], "compiled": [2.0, 1.5], "max_loss_abs_diff": 0.5,
                           "max_loss_rel_diff": 0.5, "tolerance": 1e-4, "ok": False}
    with pytest.raises(InputError, match="^eager has 2 losses for 5 steps$"):
        parity.check(torch.nn.Linear(2, 2), [], steps=5, eager=[2.0, 1.0])


def test_the_cast_is_caught_and_both_runs_are_tabulated():
    same = parity.Parity([2.0, 1.5], [2.0, 1.5], [0.0, 0.0], [0.0, 0.0], 1e-4)
    cast = parity.Parity([2.0, 1.5], [2.001, 1.52], [1e-3, 2e-2], [5e-4, 1.3e-2], 1e-4)
    runs = parity.CastCaught(same, cast)
    assert runs.caught and not parity.CastCaught(same, same).caught
    table = runs.table()
    assert list(table["run"]) == ["compiled", "compiled, bf16 cast"] and list(table["ok"]) == [True, False]
    assert list(table["max rel"]) == ["0.0e+00", "1.3e-02"] and set(table["tolerance"]) == {"1e-04"}
    steps = runs.steps_table()
    assert list(steps["step"]) == [1, 2] and list(steps["rel diff, bf16 cast"]) == [5e-4, 1.3e-2]


@pytest.mark.slow
def test_compare_trains_one_eager_run_for_both_checks():
    runs = parity.compare(models.FixedLM(seed=3), [(_ids(), _ids())], 2, backend="eager")
    assert runs.compiled.eager == runs.cast.eager and runs.compiled.ok and runs.caught
