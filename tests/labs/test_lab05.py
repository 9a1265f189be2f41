"""Lab 05: its checks accept the reference answer and reject each plausible mistake with a hint."""

from __future__ import annotations

import pandas as pd
import pytest

from perflab.gemm import (
    lab05,
)
from perflab.gemm import lab05 as lab
from perflab.grading.checks import LabCheckError


def candidate_widths(h, radius, multiple):
    centre = 8 * h // 3
    first = -(-(centre - radius) // multiple) * multiple
    return list(range(first, centre + radius + 1, multiple))


def params_delta(h, d_ff):
    return 3 * h * d_ff - 8 * h * h


def pick_width(frame, max_params_delta_pct):
    ok = frame[frame["params_delta_pct"].abs() <= max_params_delta_pct]
    return int(ok.sort_values(["tflops", "d_ff"], ascending=[False, True])["d_ff"].iloc[0])


def frame():
    """A measured frame as swiglu.search makes it, h = 512: the fastest width sits 1.17% above 8/3·h."""
    h = 512
    widths = [1344, 1352, 1360, 1368, 1376, 1384]
    tflops = [1.10, 1.05, 1.21, 1.00, 1.18, 1.30]
    return pd.DataFrame({"d_ff": widths, "tflops": tflops,
                         "params_delta_pct": [100 * params_delta(h, w) / (8 * h * h) for w in widths]})


def widths_rounded(h, radius, multiple):  # wrong convention: nearest instead of floor
    centre = round(8 * h / 3)
    first = -(-(centre - radius) // multiple) * multiple
    return list(range(first, centre + radius + 1, multiple))


def widths_half_open(h, radius, multiple):  # off by one at the top
    centre = 8 * h // 3
    first = -(-(centre - radius) // multiple) * multiple
    return list(range(first, centre + radius, multiple))


def widths_ignore_multiple(h, radius, multiple):  # ignores an input: multiples of 64 always
    return candidate_widths(h, radius, 64)


def widths_visible_example(h, radius, multiple):  # special-cased to the published h = 4096
    return candidate_widths(h, radius, multiple) if h == 4096 else candidate_widths(4096, radius, multiple)


def delta_no_baseline(h, d_ff):  # a missing term
    return 3 * h * d_ff


def delta_two_matrices(h, d_ff):  # the naive (non-gated) MLP's count
    return 2 * h * d_ff - 8 * h * h


def delta_floor_baseline(h, d_ff):  # wrong reference width
    return 3 * h * d_ff - 3 * h * (8 * h // 3)


def pick_strict(frame, max_params_delta_pct):  # off by one at the budget's edge
    ok = frame[frame["params_delta_pct"].abs() < max_params_delta_pct]
    return int(ok.sort_values(["tflops", "d_ff"], ascending=[False, True])["d_ff"].iloc[0])


def pick_ignores_budget(frame, max_params_delta_pct):  # ignores an input
    return int(frame.sort_values("tflops", ascending=False)["d_ff"].iloc[0])


def pick_closest(frame, max_params_delta_pct):  # the wrong criterion
    ok = frame[frame["params_delta_pct"].abs() <= max_params_delta_pct]
    return int(ok.iloc[ok["params_delta_pct"].abs().argmin()]["d_ff"])


def pick_calls_perflab(frame, max_params_delta_pct):
    from perflab.gemm.swiglu import recommend

    return int(recommend(frame, max_params_delta_pct).d_ff)


MUTANTS = [
    (lab.check_candidates, widths_rounded, "rounded down"),
    (lab.check_candidates, widths_half_open, "inclusive"),
    (lab.check_candidates, widths_ignore_multiple, "ignores an input"),
    (lab.check_candidates, widths_visible_example, "fits only some"),
    (lab.check_params_delta, delta_no_baseline, "8·h²"),
    (lab.check_params_delta, delta_two_matrices, "three matrices"),
    (lab.check_params_delta, delta_floor_baseline, "exactly 8/3·h"),
    (lambda f: lab.check_pick(f, frame()), pick_strict, "≤, not <"),
    (lambda f: lab.check_pick(f, frame()), pick_ignores_budget, "without the budget"),
    (lambda f: lab.check_pick(f, frame()), pick_closest, "fastest"),
    (lambda f: lab.check_pick(f, frame()), pick_calls_perflab, "calls perflab"),
]


def test_lab05_defend_a_width_not_measured():
    import pandas as pd

    frame = pd.DataFrame({"d_ff": [10880, 10944]})
    assert lab05.defend(frame, 11000) == "d_ff = 11000 was not measured: pick one of the measured widths"


@pytest.mark.parametrize(("check", "mutant", "keyword"), MUTANTS, ids=[m.__name__ for _c, m, _k in MUTANTS])
def test_mutant_is_rejected_with_a_hint_naming_the_mistake(check, mutant, keyword):
    with pytest.raises(LabCheckError, match="Hint") as err:
        check(mutant)
    assert keyword in str(err.value), str(err.value)


def test_reference_solution_passes():
    assert lab.check_candidates(candidate_widths) and lab.check_params_delta(params_delta)
    assert lab.check_pick(pick_width, frame())


def test_pick_width_is_checked_on_the_widths_that_may_win():
    """A spike that did not repeat (eligible False) is left out of the frame the learner's function sees,
    as the recommendation leaves it out: the plain 'fastest within the budget' answer is right."""
    import pandas as pd

    from perflab.grading import checks as grading

    grading.reset()
    frame = pd.DataFrame({"d_ff": [160, 176, 192], "tflops": [9.0, 2.0, 1.0], "params_delta_pct": [0.0, 0.5, 1.0],
                          "eligible": [False, True, True]})

    def fastest(frame, max_params_delta_pct):
        ok = frame[frame["params_delta_pct"].abs() <= max_params_delta_pct]
        return int(ok.sort_values(["tflops", "d_ff"], ascending=[False, True])["d_ff"].iloc[0])

    assert lab.check_pick(fastest, frame)
    grading.reset()
