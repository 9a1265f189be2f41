"""Tests of `perflab.classroom.seccomp`: the system calls a confined learner's process may not make."""

from __future__ import annotations

import subprocess
import sys

import pytest

from perflab.classroom import seccomp

needs_seccomp = pytest.mark.skipif(bool(seccomp.supported()), reason=seccomp.supported() or "supported")

PROBE = """
import ctypes, os, platform, subprocess, sys, threading
from perflab.classroom import seccomp
seccomp.install(no_processes=sys.argv[1] == "1")
nr = seccomp.ARCHES[platform.machine().lower()][2]
libc = ctypes.CDLL(None, use_errno=True)
out = []
r = libc.syscall(nr["keyctl"], 0, -3, 0)
out.append(f"keyctl {r} {ctypes.get_errno()}")
r = libc.syscall(nr["add_key"], b"user", b"perflab-test", b"x", 1, -4)
out.append(f"add_key {r} {ctypes.get_errno()}")
t = threading.Thread(target=lambda: out.append("thread"))
t.start()
t.join()
try:
    out.append(f"process {subprocess.run(['true']).returncode}")
except OSError as e:
    out.append(f"process refused {e.errno}")
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    out.append("forked")
except OSError as e:
    out.append(f"fork refused {e.errno}")
print(";".join(out))
"""


def test_each_filter_is_a_whole_bpf_program_for_every_machine_it_knows():
    for machine in ("x86_64", "aarch64"):
        keyring, processes = seccomp.program(machine=machine), seccomp.program(True, machine=machine)
        assert len(keyring) % 8 == 0 and len(processes) % 8 == 0 and len(processes) > len(keyring)
        assert len(processes) // 8 < 64  # a short program: a few instructions a system call


@needs_seccomp
def test_a_filtered_process_has_no_keyring_and_no_new_process_but_its_threads():
    run = lambda flag: subprocess.run([sys.executable, "-c", PROBE, flag], capture_output=True, text=True,  # noqa: E731
                                      timeout=60).stdout.strip().split(";")
    keyring_only = run("0")
    assert keyring_only[0] == "keyctl -1 1" and keyring_only[1] == "add_key -1 1"  # EPERM: nothing read, nothing left
    assert "thread" in keyring_only and "process 0" in keyring_only and "forked" in keyring_only
    no_processes = run("1")
    assert "thread" in no_processes and "process refused 1" in no_processes and "fork refused 1" in no_processes


LIMITS_PROBE = """
import json, resource, sys
from perflab.classroom import seccomp
resource.setrlimit(resource.RLIMIT_FSIZE, (2**29, 2**30))
before_cpu = resource.getrlimit(resource.RLIMIT_CPU)
seccomp.set_limits({"fsize": 2**31, "core": 0, "cpu": None, "bogus": 5})
print(json.dumps({"fsize": resource.getrlimit(resource.RLIMIT_FSIZE), "core": resource.getrlimit(resource.RLIMIT_CORE),
                  "cpu_same": resource.getrlimit(resource.RLIMIT_CPU) == before_cpu}))
seccomp.set_limits(None)
"""


def test_a_confined_process_lowers_its_own_limits_and_never_raises_a_hard_one():
    """fsize asked above its hard limit stops at the hard limit; core goes to 0 (the hard one kept);
    None and an unknown key change nothing; no limits at all is no change."""
    import json
    import resource

    run = subprocess.run([sys.executable, "-c", LIMITS_PROBE], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert got["fsize"] == [2**30, 2**30]
    hard_core = resource.getrlimit(resource.RLIMIT_CORE)[1]
    assert got["core"] == [0, hard_core]
    assert got["cpu_same"] is True
