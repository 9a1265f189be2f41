"""A pytest plugin: a test whose call takes longer than the suite's limit fails, saying so.

The limit is 60 s (PERFLAB_TEST_LIMIT_S overrides it, e.g. on a much slower machine). It keeps the
whole suite within its time on a 2-core machine: a test that grows past a minute is a test to
make smaller, not one to wait for. (pytest-timeout's 900 s stays as the hard stop for a hang.)
"""

import os

import pytest


def limit_s() -> float:
    return float(os.environ.get("PERFLAB_TEST_LIMIT_S", "60"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    limit = limit_s()
    if call.when == "call" and rep.passed and call.duration > limit:
        rep.outcome = "failed"
        rep.longrepr = (f"{item.nodeid} took {call.duration:.1f} s, over the {limit:g} s limit for one test: "
                        "make it smaller (PERFLAB_TEST_LIMIT_S raises the limit on a slow machine)")
