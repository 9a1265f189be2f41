#!/usr/bin/env python3
"""Hold the last test run against the suite's time budget: the benchmark maintainers run and read.

`make test` never fails a correct test for its time (tests/suite_clock.py only reports). This
reads what the suite clock recorded (results/test-times.json) and says whether the run kept to
its budget, which tests cost the most, and which notebooks took longer than a lesson may (60 s at
its smoke defaults). It exits 1 when the run was over budget, so a maintainer (or a scheduled job)
can make the budget bind without making any single test flaky.

    python tools/suite_budget.py                      # the last run against the default budget
    python tools/suite_budget.py --budget-min 5       # a faster machine's aim
    python tools/suite_budget.py FILE --top 25

The budget is the pytest part of `.ci/run` on a fresh clone with empty compiler caches, on two cores:
9 minutes, so that the whole run (setup included) keeps within 10. A quiet machine must keep to it;
the same run with one core kept busy by another program may take up to 15 minutes (`--budget-min
15`). No test should take over 30 s (`TEST_S`): the report names each one, a reason to split it or
share its work. PERFLAB_SUITE_BUDGET_MIN overrides the budget.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LESSON_S = 60.0  # a lesson runs at its smoke defaults within a minute (README, "Course map")
BUDGET_MIN = 9.0  # the pytest part of a fresh clone's `.ci/run` on two quiet cores (module docstring)
TEST_S = 30.0  # the most one test should take on a quiet run


def budget_min(record: dict, given: float | None) -> float:
    if given is not None:
        return given
    env = os.environ.get("PERFLAB_SUITE_BUDGET_MIN")
    if env:
        return float(env)
    return BUDGET_MIN


def verdict(record: dict, budget: float, top: int = 15) -> tuple[bool, list[str]]:
    """(within budget?, the report's lines) for one recorded run."""
    times = record.get("times") or {}
    wall = float(record.get("wall_s") or 0.0)
    ok = wall <= budget * 60
    lines = [f"suite: {len(times)} tests in {wall / 60:.1f} min on {record.get('cpu', '?')} "
             f"({record.get('cores', '?')} cores, {'cold' if record.get('fresh_caches') else 'warm'} caches, "
             f"{record.get('when', '?')}): {'within' if ok else 'OVER'} the {budget:g} min budget"]
    rows = sorted(((r["seconds"], n) for n, r in times.items()), reverse=True)
    total = sum(s for s, _ in rows)
    if rows:
        lines.append(f"the {min(top, len(rows))} slowest tests ({total / 60:.1f} min of test time in all):")
        lines += [f"  {s:7.1f} s  {s / total:5.1%}  {n}" for s, n in rows[:top]]
    over = [(s, n) for s, n in rows if s > TEST_S]
    if over:
        lines.append(f"{len(over)} test(s) over the {TEST_S:g} s a test should take (split them, or share their work):")
        lines += [f"  {s:7.1f} s  {n}" for s, n in over]
    passes = 2 if os.environ.get("PERFLAB_NOTEBOOK_PASSES", "1") == "2" else 1
    long = [(s / passes, n) for s, n in rows if "test_notebook_runs" in n and s / passes > LESSON_S]
    if long:
        lines.append(f"notebooks over the {LESSON_S:g} s a lesson may take at its smoke defaults (per pass):")
        lines += [f"  {s:7.1f} s  {n}" for s, n in long]
    return ok, lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("file", nargs="?", default=str(ROOT / "results" / "test-times.json"))
    p.add_argument("--budget-min", type=float, default=None, help="the budget in minutes (default: see above)")
    p.add_argument("--top", type=int, default=15, help="how many of the slowest tests to list (default 15)")
    a = p.parse_args(argv)
    try:
        record = json.loads(Path(a.file).read_text())
    except FileNotFoundError:
        print(f"suite_budget: no record at {a.file}: run `make test` first (tests/suite_clock.py writes it)")
        return 2
    except (OSError, ValueError) as e:
        print(f"suite_budget: cannot read {a.file}: {e}")
        return 2
    ok, lines = verdict(record, budget_min(record, a.budget_min), a.top)
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
