"""System calls a learner's processes may not make, refused by the kernel (seccomp), whatever the
Python code does.

    install(no_processes=False)   # in a confined process, before any learner code runs

Two filters, each a short classic-BPF program installed on every thread of the calling process
(`SECCOMP_FILTER_FLAG_TSYNC`) and inherited by everything it starts, across `execve`:

* `KEYRING` for every confined process (the kernel's run, the answer worker, a lab's ranks):
  `keyctl`, `add_key` and `request_key` fail with EPERM, so no learner reads the grading user's
  keyrings, nor leaves a key in them;
* with `no_processes=True` (the answer worker and the ranks, once their trusted phase is over):
  no new process, by any route (`subprocess` with its audit call removed, `os.posix_spawn`, a
  library's own `fork`): `execve` and `execveat`, `fork` and `vfork` fail with EPERM, `clone`
  without `CLONE_THREAD` too, and `clone3` with ENOSYS (so that a thread is still made, through
  `clone`). Threads stay allowed: torch and Python need them.

System calls of another ABI than the process's own (32-bit calls through `int 0x80` on x86_64,
x32 calls) are refused whole: their numbers differ, so a filter on numbers would not see them.

`set_limits(limits)`, the resource limits such a process sets on itself before anything else, lives
here too: this file imports nothing of perflab, and the ranks of lab 06 load it by its path, in a
sandbox where perflab is not in view, so it is the one place both the answer worker and the ranks
can take it from. Linux on x86_64 or aarch64 only; elsewhere `supported()` says why not.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys

# classic BPF: instruction classes, sizes, modes, jumps (linux/filter.h, linux/bpf_common.h)
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
_ERRNO = 0x00050000  # SECCOMP_RET_ERRNO | errno
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (args[0]'s low half: little-endian)
CLONE_THREAD = 0x00010000
X32_BIT = 0x40000000

# (audit arch, seccomp syscall number, {name: number}) per machine (the kernel's unistd tables)
ARCHES = {
    "x86_64": (0xC000003E, 317, {"keyctl": 250, "add_key": 248, "request_key": 249, "execve": 59, "execveat": 322,
                                 "fork": 57, "vfork": 58, "clone": 56, "clone3": 435}),
    "aarch64": (0xC00000B7, 277, {"keyctl": 219, "add_key": 217, "request_key": 218, "execve": 221, "execveat": 281,
                                  "clone": 220, "clone3": 435}),
}
ARCHES["amd64"] = ARCHES["x86_64"]
ARCHES["arm64"] = ARCHES["aarch64"]

KEYRING = ("keyctl", "add_key", "request_key")
PROCESSES = ("execve", "execveat", "fork", "vfork")  # and clone without CLONE_THREAD, clone3


def supported() -> str:
    """'' where filters can be installed here, else why not."""
    if not sys.platform.startswith("linux"):
        return "seccomp needs Linux"
    if platform.machine().lower() not in ARCHES:
        return f"no seccomp table for {platform.machine()} (x86_64 and aarch64 have one)"
    return ""


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(no_processes: bool = False, machine: str | None = None) -> bytes:
    """The filter, as the bytes of its `struct sock_filter` array."""
    arch, _, nrs = ARCHES[(machine or platform.machine()).lower()]
    deny = _ERRNO | errno.EPERM
    out = [_op(_LD_W_ABS, _ARCH), _op(_JEQ_K, arch, jt=1), _op(_RET_K, deny), _op(_LD_W_ABS, _NR)]
    if arch == ARCHES["x86_64"][0]:
        out += [_op(_JGE_K, X32_BIT, jf=1), _op(_RET_K, deny)]
    names = list(KEYRING) + (list(PROCESSES) if no_processes else [])
    for name in names:
        if name in nrs:
            out += [_op(_JEQ_K, nrs[name], jf=1), _op(_RET_K, deny)]
    if no_processes:
        out += [_op(_JEQ_K, nrs["clone3"], jf=1), _op(_RET_K, _ERRNO | errno.ENOSYS)]
        # clone: a thread (CLONE_THREAD set) is allowed, a process is not
        out += [_op(_JEQ_K, nrs["clone"], jf=4), _op(_LD_W_ABS, _ARG0), _op(_JSET_K, CLONE_THREAD, jf=1),
                _op(_RET_K, _ALLOW), _op(_RET_K, deny)]
    out.append(_op(_RET_K, _ALLOW))
    return b"".join(out)


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


RLIMITS = {"as": "RLIMIT_AS", "cpu": "RLIMIT_CPU", "fsize": "RLIMIT_FSIZE", "core": "RLIMIT_CORE",
           "nproc": "RLIMIT_NPROC"}


def set_limits(limits: dict | None) -> None:
    """Lower this process's own resource limits (`worker.Confinement.limits`: "as", "cpu", "fsize",
    "core", "nproc"), each to its value or to the hard limit where that is lower; a hard limit is never
    raised. A value of None, an unknown key and a limit this system refuses are left as they are."""
    import resource

    for key, value in (limits or {}).items():
        which = getattr(resource, RLIMITS.get(key, ""), None)
        if which is None or value is None:
            continue
        try:
            _, hard = resource.getrlimit(which)
            top = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
            resource.setrlimit(which, (top, hard))
        except (ValueError, OSError):
            pass

def install(no_processes: bool = False) -> None:
    """Install the filter on this process and all its threads (see the module's docstring). Raises
    OSError where the kernel refuses it, RuntimeError where this machine has no table."""
    why = supported()
    if why:
        raise RuntimeError(why)
    code = program(no_processes)
    _, nr_seccomp, _ = ARCHES[platform.machine().lower()]
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _Prog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: required to filter without privileges
        e = ctypes.get_errno()
        raise OSError(e, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(e)}")
    # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog): every thread of the process
    rc = libc.syscall(ctypes.c_long(nr_seccomp), ctypes.c_long(1), ctypes.c_long(1), ctypes.byref(prog))
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"seccomp: {os.strerror(e) if rc < 0 else f'thread {rc} could not be synchronised'}")
