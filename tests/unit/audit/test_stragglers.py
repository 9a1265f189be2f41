"""Across ranks: the robust z-score that names a straggler, and the waits in collectives it costs."""

from pathlib import Path

import pytest

from perflab.audit.hta import per_step
from perflab.audit.rank_trace import read_rank
from perflab.audit.stragglers import Z_LIMIT, collective_waits, robust_z, stragglers

from .jobs import rank_trace


def test_robust_z_flags_only_the_outlier():
    z = robust_z({0: 1.00, 1: 1.01, 2: 0.99, 3: 1.00, 4: 1.30})
    assert z[4] > Z_LIMIT and all(abs(z[r]) < Z_LIMIT for r in range(4))
    # sub-percent differences never count: the MAD is floored at 1 % of the median
    assert max(robust_z({0: 1.0, 1: 1.0, 2: 1.0, 3: 1.02}).values()) < Z_LIMIT
    assert robust_z({0: 0.0, 1: 0.0, 2: 0.0}) == {0: 0.0, 1: 0.0, 2: 0.0}


def test_a_rank_with_long_steps_is_a_straggler_by_step_time():
    st = stragglers({0: 0.100, 1: 0.101, 2: 0.099, 3: 0.140}, {0: 0.05, 1: 0.05, 2: 0.05, 3: 0.05})
    assert st.ranks == [3] and list(st.by_step) == [3] and st.by_compute == {}
    assert st.verdict.startswith("rank 3 (step time z = ") and st.slowest_rank == 3
    two = stragglers({0: 0.1, 1: 0.3}, {0: 0.05, 1: 0.05})
    assert two.ranks == [] and "no verdict" in two.verdict and two.slowest_rank == 1
    assert two.step_spread == pytest.approx(1.0)  # (0.3 − 0.1) / median 0.2


def test_the_last_to_arrive_held_the_others_up():
    # rank 1 launches every all-reduce 3 ms after rank 0 does
    steps = {r: per_step(read_rank(Path(f"r{r}.json"), rank_trace(r, 2, late_us=3_000 if r else 0), only_one=False))
             for r in range(2)}
    w = collective_waits(steps, {0: 0.0, 1: 0.0})
    assert (w.matched, w.unmatched, w.steps) == (3, 0, 3)
    assert w.held_up_others_s == {0: 0.0, 1: pytest.approx(3e-3)} and w.waited_s == {0: pytest.approx(3e-3), 1: 0.0}
    one = collective_waits({0: steps[0]}, {0: 0.0})
    assert (one.matched, one.steps) == (0, 0)


def test_with_the_spread_floored_a_rank_must_be_about_5_percent_slower():
    """The MAD floored at 1 % of the median: z = 0.6745 · 5.2 % / 1 % reaches 3.5, so 6 % stands out, 5 % not."""
    assert robust_z({0: 1.0, 1: 1.0, 2: 1.0, 3: 1.06})[3] > Z_LIMIT
    assert robust_z({0: 1.0, 1: 1.0, 2: 1.0, 3: 1.05})[3] < Z_LIMIT
