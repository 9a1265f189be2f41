"""Tests of `perflab.profiling.quiet`: lesson 09's name for the one stderr silencer (`perflab.core.stderr`)."""

import os
import subprocess
import sys

from perflab.core import stderr
from perflab.profiling.quiet import quiet_profiler, without_noise

USDT = "USDT:2026-11-23 20:17:11 12996:12996 SyncActivityProfilerHandler.cpp:52] profiler_start\n"


def test_it_is_the_core_silencer():
    assert quiet_profiler is stderr.quiet_stderr and without_noise is stderr.without_noise
    assert without_noise(USDT + "a real warning\n") == "a real warning\n"


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
