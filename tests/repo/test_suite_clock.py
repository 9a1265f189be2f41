"""The suite's clock reports slow tests without failing them, and the budget tool judges a run."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import suite_budget  # noqa: E402


def test_a_slow_test_passes_and_is_reported(tmp_path):
    (tmp_path / "test_slow.py").write_text("import time\n\ndef test_slow():\n    time.sleep(0.6)\n\n"
                                          "def test_quick():\n    pass\n")
    times = tmp_path / "times.json"
    env = {**os.environ, "PERFLAB_SLOW_TEST_S": "0.3", "PERFLAB_TEST_TIMES": str(times),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "suite_clock", "-q", "-p", "no:cacheprovider",
                        str(tmp_path / "test_slow.py")], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=120)
    assert r.returncode == 0, r.stdout
    assert "2 passed" in r.stdout, r.stdout
    assert "1 test(s) took longer than 0.3 s" in r.stdout and "test_slow.py::test_slow" in r.stdout
    record = json.loads(times.read_text())
    assert set(record["times"]) == {"test_slow.py::test_slow", "test_slow.py::test_quick"}
    assert record["times"]["test_slow.py::test_slow"]["seconds"] >= 0.6
    assert record["times"]["test_slow.py::test_slow"]["outcome"] == "passed"


def _record(wall_s, fresh=False):
    return {"wall_s": wall_s, "cpu": "AMD EPYC", "cores": 2, "fresh_caches": fresh, "times": {
        "tests/notebooks/test_notebooks.py::test_notebook_runs[notebooks/06_collectives.ipynb]": {"seconds": 83.0, "outcome": "passed"},
        "tests/test_x.py::test_quick": {"seconds": 1.0, "outcome": "passed"}}}


def test_the_budget_tool_judges_the_wall_time_and_names_long_lessons():
    ok, lines = suite_budget.verdict(_record(5.5 * 60), budget=6.0)
    assert ok and "within the 6 min budget" in lines[0]
    assert any("06_collectives" in ln for ln in lines[lines.index(next(x for x in lines if "notebooks over" in x)):])
    ok, lines = suite_budget.verdict(_record(6.5 * 60), budget=6.0)
    assert not ok and "OVER the 6 min budget" in lines[0]
    assert suite_budget.budget_min(_record(1, fresh=True), None) == suite_budget.budget_min(_record(1), None) == 9.0
    assert suite_budget.budget_min(_record(1), 15.0) == 15.0


def test_the_budget_tool_names_every_test_over_30_s():
    _, lines = suite_budget.verdict(_record(5 * 60), budget=9.0)
    i = next(i for i, ln in enumerate(lines) if "over the 30 s a test should take" in ln)
    assert lines[i].startswith("1 test(s)") and "06_collectives" in lines[i + 1]
    assert not any("test_quick" in ln for ln in lines[i:])


def test_the_budget_tool_exits_by_its_verdict(tmp_path):
    f = tmp_path / "t.json"
    f.write_text(json.dumps(_record(20 * 60)))
    assert suite_budget.main([str(f), "--budget-min", "6"]) == 1
    assert suite_budget.main([str(f), "--budget-min", "30"]) == 0
    assert suite_budget.main([str(tmp_path / "missing.json")]) == 2
