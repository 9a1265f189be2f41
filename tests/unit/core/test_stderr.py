"""Tests of `perflab.core.stderr`: the known C++ noise is hidden, every other line comes back."""

import os
import subprocess
import sys

from perflab.core.stderr import is_noise, without_noise

# what torch 2.x prints today, copied from a run (profiler start/stop, the allocator's note)
USDT = "USDT:2026-11-23 20:17:11 12996:12996 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
STAGE = "STAGE:2026-11-23 20:18:25 13392:13392 SyncActivityProfilerHandler.cpp:51] Completed Stage: Warm Up\n"
ALLOC = ("[W1127 15:48:51.976255077 CPUAllocator.cpp:245] Memory block of unknown size was allocated before the "
         "profiling started, profiler results will not include the deallocation event\n")
OLD_ALLOC = ("[W CPUAllocator.cpp:249] Warning: Memory block of unknown size was allocated before the profiling "
             "started, profiler results will not include the deallocation event (function operator())\n")
REAL = "[W1127 15:48:51.976255077 Module.cpp:12] Warning: a real C++ warning\n"
ERROR = "terminate called after throwing an instance of 'c10::Error'\n"


def test_only_the_known_lines_are_noise():
    for line in (USDT, STAGE, ALLOC, OLD_ALLOC):
        assert is_noise(line), line
    for line in (REAL, ERROR, "USDT is a word in a real message\n", "Memory block of unknown size was allocated\n"):
        assert not is_noise(line), line
    assert without_noise(USDT + REAL + ALLOC + ERROR + STAGE) == REAL + ERROR
    assert without_noise("no newline at the end") == "no newline at the end"


def _child(body: str) -> subprocess.CompletedProcess:
    code = "import os, sys\nfrom perflab.core.stderr import quiet_stderr\n" + body
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})


def test_a_child_that_prints_both_kinds_keeps_only_the_real_lines():
    lines = "".join((USDT, REAL, ALLOC, ERROR, STAGE))
    r = _child(f"with quiet_stderr():\n    os.write(2, {lines.encode()!r})\n    print('python line', file=sys.stderr)\n"
               "os.write(2, b'after\\n')\n")
    assert r.returncode == 0, r.stderr
    assert r.stderr == REAL + ERROR + "python line\nafter\n"


def test_nested_blocks_and_an_exception_still_give_the_lines_back():
    r = _child(f"try:\n    with quiet_stderr():\n        with quiet_stderr():\n            os.write(2, {(ALLOC + REAL).encode()!r})\n"
               f"        os.write(2, {(USDT + 'outer kept').encode()!r})\n        raise KeyError('boom')\n"
               "except KeyError:\n    pass\n")
    assert r.returncode == 0, r.stderr
    assert r.stderr == REAL + "outer kept"


def test_the_profilers_own_lines_never_reach_stderr_but_real_ones_do():
    r = _child("import torch\nfrom torch.profiler import ProfilerActivity, profile\nx = torch.ones(1000, 1000)\n"
               "with quiet_stderr():\n"
               "    with profile(activities=[ProfilerActivity.CPU], profile_memory=True):\n"
               "        del x\n        torch.ones(3) + 1\n"
               "    os.write(2, b'kept line\\n')\n")
    assert r.returncode == 0, r.stderr
    assert r.stderr == "kept line\n"
