"""The suite's xdist groups take effect (tests/conftest.py): the lessons run one after another on one
worker, never two at once on two cores, and the site test reads the copies they executed.

pytest 9.2 silently broke this (pytest-dev/pytest-xdist#1386: its structured node ids ignore the
group suffix xdist writes), and nothing failed: the lessons were simply spread over both workers.
So this runs three cheap tests of the lessons' group under `-n 2 --dist loadgroup` and checks
that one worker ran them all."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHEAP_LESSON_GROUP = ["tests/repo/test_site.py::test_links_between_lessons_are_rewritten_to_pages",
                      "tests/repo/test_site.py::test_display_math_becomes_mathml_that_needs_no_script",
                      "tests/repo/test_site.py::test_a_widgets_figure_is_put_on_the_page_without_widget_javascript"]


@pytest.mark.slow
def test_a_group_runs_on_one_worker():
    r = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider",
                        *CHEAP_LESSON_GROUP], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    ran = re.findall(r"\[(gw\d+)\] \[\s*\d+%\] PASSED (\S+)", r.stdout)
    assert len(ran) == len(CHEAP_LESSON_GROUP), r.stdout[-3000:]
    assert all(nodeid.endswith("@lessons") for _gw, nodeid in ran), ran
    assert len({gw for gw, _ in ran}) == 1, f"the lessons' group was split over workers: {ran}"


def test_the_slow_tests_are_handed_out_first_after_the_notebooks():
    """Longest first: the tests marked `slow` are collected before the rest (each in its files' order), so
    that the last tests a worker takes are short and neither worker idles waiting for the other."""
    files = ["tests/repo/test_suite_clock.py", "tests/repo/test_suite_groups.py"]
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    ids = [ln for ln in r.stdout.splitlines() if "::" in ln]
    slow = "tests/repo/test_suite_groups.py::test_a_group_runs_on_one_worker"
    assert ids[0] == slow, ids[:3]
    quick = [i for i in ids if i != slow]
    assert quick[0].startswith("tests/repo/test_suite_clock.py::"), quick[:3]  # the rest keep their order
