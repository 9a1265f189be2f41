"""Confine a learner's processes with the operating system: bubblewrap (`bwrap`).

`perflab grade` runs each learner's notebook kernel, answer worker and lab 06's ranks through
`Sandbox.command`, which binds **only what the code needs** (an allowlist, not the whole system
with holes cut in it):

* read-only: the system's programs and libraries (`/usr`, and `/bin`, `/lib`… where they are
  folders), `/sys`, a few files of `/etc` (`ETC`: the loader's cache, users and groups, hosts, time
  zone, fonts; no `shadow`, no `ssl/private`), the Python install and the virtual environment,
  the perflab package (left out for lab 06's ranks), and the folders the caller names `readable`;
* read-write: the folders the caller names `writable` (a learner's own, never shared);
* nothing else: no checkout around the environment (its `labs/`, solutions, tests, `.git`), no other
  copy of the course on the machine, no grader's home (where Python is installed in it, as with
  pyenv, only that install), no other learner's files, no daemon's socket;
* a fresh, private `/tmp`, `/dev/shm` (sized tmpfs, `tmp_bytes` each), `/run` and `/dev`;
* its own PID namespace (no other process visible, so none to read, trace or kill; every process
  ends with the sandbox's first one, however it was forked or `setsid`), its own IPC and UTS
  namespaces, a new session (no terminal to type into), no capabilities;
* its own network namespace: only a loopback interface (up), no way out.

    box = find()                  # None where bwrap is missing or cannot make namespaces here
    argv = box.command(["python", "x.py"], writable=[folder], hidden=[labs], tmp_bytes=2**29)

`learner_env` gives a learner's processes an environment from an allowlist (`ALLOWED_ENV`), not the
grader's with credentials filtered out. The limits (cgroup.py), the system calls refused
(seccomp.py) and the writable folder's quota (boxes.py) are set by the caller.

What it does not stop: a learner's code still runs as the grading user (without capabilities), and
reads what the view shows: the system's files, the Python environment, perflab's own modules (the
answer worker's audit hook and its disarmed answer functions guard those that compute an answer,
in-process, which is not a security boundary).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TOOL = "bwrap"
INSTALL = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys", "/nix/store")
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "passwd", "group", "nsswitch.conf",
       "hosts", "host.conf", "alternatives", "fonts", "mime.types", "os-release", "locale.alias", "locale.conf")
# what a learner's process may inherit of the grader's environment: names, and name patterns
ALLOWED_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
               "NVIDIA_DRIVER_CAPABILITIES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "PERFLAB_LOCK",
               "PERFLAB_LOCK_DIR")
ALLOWED_ENV_PATTERN = re.compile(r"LC_[A-Z]+")


def learner_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment of a learner's process: the allowed variables of `base` (default: this
    process's), then `extra`."""
    src = os.environ if base is None else base
    env = {k: v for k, v in src.items() if k in ALLOWED_ENV or ALLOWED_ENV_PATTERN.fullmatch(k)}
    env.update(extra)
    return env


@dataclass(frozen=True)
class Sandbox:
    """A way to run a command confined (`tool`: bwrap's path)."""

    tool: str

    def command(self, cmd: Sequence[str], *, writable: Iterable[Path | str] = (), readable: Iterable[Path | str] = (),
                hidden: Iterable[Path | str] = (), cwd: Path | str | None = None, perflab: bool = True,
                tmp_bytes: int | None = None, dirs: Iterable[str] = ()) -> list[str]:
        """`cmd` run confined (see the module's docstring): `writable` folders bound read-write,
        `readable` ones (or files) read-only, `hidden` ones covered by an empty folder where they lie
        inside what is bound; `perflab=False` leaves the perflab package out; `tmp_bytes` sizes the
        private /tmp and /dev/shm; `dirs` are made in the private /tmp (a working folder)."""
        size = ["--size", str(int(tmp_bytes))] if tmp_bytes else []
        args = [self.tool, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try",
                "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--proc", "/proc", "--dev", "/dev",
                *size, "--tmpfs", "/tmp", *size, "--tmpfs", "/dev/shm", "--size", str(2**20), "--tmpfs", "/run"]
        binds: list[Path] = []
        for top in SYSTEM:
            p = Path(top)
            if p.is_symlink():
                args += ["--symlink", os.readlink(p), top]
            elif p.is_dir():
                args += ["--ro-bind", top, top]
                binds.append(p)
        for name in ETC:
            p = Path("/etc") / name
            if p.exists():
                args += ["--ro-bind", str(p), str(p)]
        pkg = _real(Path(__import__("perflab").__file__).parent)
        env = [k for k in (_real(p) for p in needed()) if k.exists() and (perflab or k != pkg)]
        for k in sorted(set(env), key=lambda p: len(p.parts)):
            if not any(_under(k, b) for b in binds):
                args += ["--ro-bind", str(k), str(k)]
                binds.append(k)
        covered = [] if perflab else [pkg]
        covered += [h for h in (_real(h) for h in hidden) if h.is_dir()]
        done: list[Path] = []
        for h in sorted(set(covered), key=lambda p: len(p.parts)):  # only what lies inside something bound
            if any(_under(h, b) for b in binds) and not any(_under(h, c) for c in done):
                args += ["--tmpfs", str(h)]
                done.append(h)
        for r in (_real(r) for r in readable):
            if r.exists():
                args += ["--ro-bind", str(r), str(r)]
        for w in writable:
            w = _real(w)
            args += ["--bind", str(w), str(w)]
        for d in dirs:
            args += ["--dir", str(d)]
        if cwd is not None:
            args += ["--chdir", str(cwd if str(cwd) in map(str, dirs) else _real(cwd))]
        return [*args, "--", *cmd]


PRIVATE = (Path("/tmp"), Path("/run"), Path("/dev/shm"))  # each confined process gets empty ones of its own


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
    from perflab.classroom import seccomp

    if seccomp.supported():
        return f"no way to refuse a learner's system calls here ({seccomp.supported()})"
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
