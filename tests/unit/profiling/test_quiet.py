"""Tests of `perflab.profiling.quiet`."""

import os
import subprocess
import sys

from perflab.profiling.quiet import without_noise

USDT = "USDT:2026-11-23 20:17:11 12996:12996 SyncActivityProfilerHandler.cpp:52] profiler_start\n"


STAGE = "STAGE:2026-11-23 20:18:25 13392:13392 SyncActivityProfilerHandler.cpp:51] Completed Stage: Warm Up\n"


def test_only_the_profilers_lines_are_dropped():
    assert without_noise(USDT + "a real warning\n" + STAGE) == "a real warning\n"
    assert without_noise("USDT is a word in a real message\n") == "USDT is a word in a real message\n"


def test_a_profiled_block_prints_no_usdt_but_keeps_other_stderr():
    code = ("import os, sys, torch\nfrom perflab.profiling.quiet import quiet_profiler\n"
            "with quiet_profiler():\n"
            "    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):\n"
            "        torch.ones(3) + 1\n"
            "    os.write(2, b'kept line\\n')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50,
                       env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert r.returncode == 0, r.stderr
    assert "USDT" not in r.stderr and "kept line" in r.stderr
