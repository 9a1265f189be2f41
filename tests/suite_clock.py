"""A pytest plugin: the suite's clock. It times every test and reports; it never fails one.

A correct test must not fail because the machine is slower or its caches are cold, so time is
guarded by a report and a benchmark, not by a per-test limit:

* at the end of a run it prints the tests whose call took longer than the soft limit
  (`PERFLAB_SLOW_TEST_S`, default 30 s: a test over it is a reason to split it or share its work)
  and writes every test's time, with the run's wall time and the machine's CPU, to
  `results/test-times.json` (`PERFLAB_TEST_TIMES` names another file);
* `tools/suite_budget.py` (`make suite-budget`) reads that file and holds the run against the
  suite's budget: that is where a maintainer sees the suite grow, and where it fails.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def soft_limit_s() -> float:
    return float(os.environ.get("PERFLAB_SLOW_TEST_S", "30"))


def times_path() -> Path:
    return Path(os.environ.get("PERFLAB_TEST_TIMES") or ROOT / "results" / "test-times.json")


def compiler_cache_was_cold() -> bool:
    """Did the run start with an empty inductor cache (a fresh machine, or TORCHINDUCTOR_CACHE_DIR
    pointed at an empty folder)? Then every lesson that compiles pays its first compile."""
    import getpass
    import tempfile

    d = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not d:
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = "unknown"
        d = os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")
    p = Path(d)
    return not p.is_dir() or not any(p.iterdir())


class SuiteClock:
    def __init__(self) -> None:
        self.t0 = time.time()
        self.cold = compiler_cache_was_cold()
        self.rows: dict[str, dict] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        rep = outcome.get_result()
        if call.when == "call":
            self.rows[item.nodeid] = {"seconds": round(call.duration, 3), "outcome": rep.outcome}

    def pytest_runtest_logreport(self, report):  # under xdist the workers' reports arrive here
        if report.when == "call" and report.nodeid not in self.rows:
            self.rows[report.nodeid] = {"seconds": round(report.duration, 3), "outcome": report.outcome}

    def pytest_terminal_summary(self, terminalreporter):
        if not self.rows:
            return
        wall = time.time() - self.t0
        limit = soft_limit_s()
        slow = sorted(((r["seconds"], n) for n, r in self.rows.items() if r["seconds"] > limit), reverse=True)
        cpu = _cpu_name()
        record = {"wall_s": round(wall, 1), "tests": len(self.rows), "cpu": cpu, "cores": os.cpu_count(),
                  "when": time.strftime("%Y-%m-%d %H:%M:%S"), "soft_limit_s": limit,
                  "fresh_caches": self.cold, "times": self.rows}
        path = times_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record, indent=1))
            where = f"; every test's time in {path}"
        except OSError as e:
            where = f"; could not write {path}: {e.strerror}"
        tr = terminalreporter
        tr.write_sep("-", "suite clock")
        tr.write_line(f"{len(self.rows)} tests in {wall / 60:.1f} min of wall time on {cpu}{where}")
        if slow:
            tr.write_line(f"{len(slow)} test(s) took longer than {limit:g} s (a report, not a failure: "
                          "make them smaller; `make suite-budget` holds the run against the budget):")
            for s, n in slow[:10]:
                tr.write_line(f"  {s:7.1f} s  {n}")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist) keeps the clock
        config.pluginmanager.register(SuiteClock(), "perflab-suite-clock")
