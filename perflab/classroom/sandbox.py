"""Confine a learner's processes with the operating system: bubblewrap (`bwrap`).

`perflab grade` runs each learner's notebook kernel and answer worker through `Sandbox.command`:

* the system and the installed course read-only (`--ro-bind / /`): no `.pth` file in site-packages,
  no rewritten `__pycache__`, nothing that outlives the learner;
* the course's labs and solutions, its tests, the submissions and the grader's working folder
  hidden (an empty tmpfs over each; the Python environment and the perflab package put back,
  read-only, where they lie inside one);
* a fresh, private `/tmp`, `/dev` and `/run` (no socket of the system's daemons under `/run`: the
  Docker daemon's, D-Bus', an SSH agent's), and only the learner's own folder writable;
* its own PID namespace (no other process visible, so none to read, trace or kill; every process
  ends with the sandbox's first one, however it was forked or `setsid`), its own IPC and UTS
  namespaces, a new session (no terminal to type into), no capabilities;
* its own network namespace: only a loopback interface (up, so that a lab's ranks can meet on
  127.0.0.1), no way out;
* the limits the grader sets (`resource`: memory, CPU time, file size, processes) inherited.

    box = find()                  # None where bwrap is missing or cannot make namespaces here
    argv = box.command(["python", "x.py"], writable=[folder], hidden=[labs, submissions])

What it does not stop: a Unix socket left in view elsewhere than `/run` and `/tmp` can still be
connected to (a socket ignores the read-only mount and the network namespace); files of the grading
user that are readable and not hidden (its home is hidden unless the Python install lives in it, as
with pyenv: then `~/.ssh`, `~/.aws` and the like are readable); a learner's code still runs as the grading user (without capabilities), so
with a root grader the process limit (RLIMIT_NPROC) is not enforced by the kernel; it may use its
share of CPU and memory up to the limits; and it can read what the read-only view shows (the
system, the Python environment, perflab's own modules; the in-process audit hook of the answer
worker still guards those of perflab that compute an answer).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

TOOL = "bwrap"
INSTALL = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"


@dataclass(frozen=True)
class Sandbox:
    """A way to run a command confined (`tool`: bwrap's path)."""

    tool: str

    def command(self, cmd: Sequence[str], *, writable: Iterable[Path | str] = (), readable: Iterable[Path | str] = (),
                hidden: Iterable[Path | str] = (), cwd: Path | str | None = None) -> list[str]:
        """`cmd` run confined: `writable` folders bound read-write, `readable` ones read-only (where a
        hidden folder or the private /tmp covers them), `hidden` ones replaced by an empty folder."""
        args = [self.tool, "--ro-bind", "/", "/", "--dev", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc",
                "--tmpfs", "/tmp", "--tmpfs", "/run", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
                "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        keep = [_real(p) for p in needed()]
        hide: list[Path] = []
        for h in sorted({_real(h) for h in hidden}, key=lambda p: len(p.parts)):
            if h.is_dir() and not _system(h) and not any(_under(h, o) for o in [*hide, *PRIVATE]):
                hide.append(h)
        # the environment, where a hidden folder or the private /tmp and /run cover it (a checkout under /tmp)
        back = [k for k in keep if any(_under(k, h) for h in [*hide, *PRIVATE])]
        for h in hide:
            args += ["--tmpfs", str(h)]
        for k in back:
            args += ["--ro-bind", str(k), str(k)]
        for h in sorted({_real(h) for h in hidden}):  # a hidden folder inside one put back
            if h.is_dir() and any(_under(h, k) and h != k for k in back):
                args += ["--tmpfs", str(h)]
        for r in (_real(r) for r in readable):
            if r.exists():
                args += ["--ro-bind", str(r), str(r)]
        for w in writable:
            w = _real(w)
            args += ["--bind", str(w), str(w)]
        if cwd is not None:
            args += ["--chdir", str(_real(cwd))]
        return [*args, "--", *cmd]


PRIVATE = (Path("/tmp"), Path("/run"))  # each confined process gets empty ones of its own


def needed() -> list[Path]:
    """What every confined Python needs to see, put back where a hidden folder covers it: the
    environment (its prefix and its interpreter's) and the perflab package."""
    import perflab

    out = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent,
           Path(perflab.__file__).resolve().parent]
    venv = Path(sys.executable).parent.parent  # under `python -S` (the judge) sys.prefix is the base one
    if (venv / "pyvenv.cfg").is_file():
        out.append(venv)
    out += [Path(p) for p in sys.path if p and Path(p).name in ("site-packages", "dist-packages")]
    return list(dict.fromkeys(out))


def _real(p: Path | str) -> Path:
    return Path(os.path.realpath(p))


def _under(p: Path, top: Path) -> bool:
    return p == top or top in p.parents


def _system(h: Path) -> bool:
    """Whether hiding `h` would hide the system itself: `/`, or a folder holding the Python install
    (the base one: a virtual environment, even one of copied binaries inside the checkout, is put
    back by `needed`, so the checkout around it is still hidden, its `.git` with it)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return h == Path("/") or _under(_real(sys.base_prefix), h) or _under(_real(base), h)


@functools.cache
def find() -> Sandbox | None:
    """bubblewrap, where it is installed and can make its namespaces here (a container may forbid
    them); else None."""
    why = unavailable()
    return None if why else Sandbox(shutil.which(TOOL) or TOOL)


@functools.cache
def unavailable() -> str:
    """Why this machine cannot confine a learner ('' when it can)."""
    if not sys.platform.startswith("linux"):
        return f"the sandbox ({TOOL}) needs Linux"
    tool = shutil.which(TOOL)
    if tool is None:
        return f"no {TOOL} on the PATH: {INSTALL}"
    trial = Sandbox(tool).command(["/bin/true"])
    try:
        out = subprocess.run(trial, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{TOOL} does not run here ({e})"
    if out.returncode != 0:
        lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
        return f"{TOOL} cannot make its namespaces here ({(lines or ['exit status ' + str(out.returncode)])[-1][:160]})"
    return ""


def protect() -> None:
    """Make this process non-dumpable: another process of the same user (a learner's process,
    where it is not confined) cannot then read its memory or write into its pipes through /proc."""
    import contextlib

    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def python_path() -> list[str]:
    """The folders a trusted Python started with `-I -S` needs on its path: perflab's, then this
    environment's site-packages (their `.pth` files are not run)."""
    import perflab

    out = [str(Path(perflab.__file__).resolve().parents[1])]
    for p in sys.path:
        if p and os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages") and p not in out:
            out.append(p)
    return out
