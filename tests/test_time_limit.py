"""The suite's per-test time limit fails a slow test and names it."""

import os
import subprocess
import sys
from pathlib import Path


def test_a_test_over_the_limit_fails(tmp_path):
    (tmp_path / "test_slow.py").write_text("import time\n\ndef test_slow():\n    time.sleep(1.2)\n\n"
                                          "def test_quick():\n    pass\n")
    env = {**os.environ, "PERFLAB_TEST_LIMIT_S": "0.5", "PYTHONPATH": str(Path(__file__).parent)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "time_limit", "-q", "-p", "no:cacheprovider",
                        str(tmp_path / "test_slow.py")], capture_output=True, text=True, env=env, cwd=tmp_path,
                       timeout=120)
    assert r.returncode == 1, r.stdout
    assert "1 failed, 1 passed" in r.stdout, r.stdout
    assert "test_slow.py::test_slow took 1." in r.stdout and "over the 0.5 s limit" in r.stdout
