"""One control group per learner: the memory, processes and CPU of everything a learner's grading
starts, counted together and capped, whoever runs it (a root grader included).

    cgroups = Cgroups.make()               # this grading's folder of learners' groups, or None
    group = cgroups.learner(0, memory_bytes=3 * 2**30, processes=512, cpus=1)   # or None
    proc = subprocess.Popen(group.wrap(cmd))   # cmd, and all it starts, counted in the group
    group.close()                          # every process left in it killed, the group removed

Made through the cgroup filesystem, as root or where the machine delegates it:
* **v2** where this process's own group delegates the `memory` and `pids` controllers (and `cpu`
  when it can): `memory.max` (with `memory.swap.max` 0), `pids.max`, `cpu.max`;
* **v1** otherwise, where the `memory`, `pids` and `cpu` hierarchies are mounted and writable (a
  machine with a v2 hierarchy that holds no controller and no systemd as PID 1, as the course's CI
  machines): `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`), `pids.max`,
  `cpu.cfs_quota_us`.
Either way a group's memory counts its processes' pages, their children's, the tmpfs pages they
write (their sandbox's /tmp and /dev/shm, their sized working folder) and the page cache they read
through; its process count binds a root user as any other; its CPU is `cpus` cores' worth.

A process joins its group before it runs anything: `wrap` puts `/bin/sh` in front of the command,
which writes its own pid into the group and then becomes the command (`exec`), so that no child
is ever born outside it. Where no group can be made (`Cgroups.make()` is None, `why()` says why),
`perflab grade` grades with per-process limits and every report says so.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CONTROLLERS = ("memory", "pids", "cpu")
JOIN = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n - 1)); done; exec "$@"'
EXIT_JOIN = 125  # the wrapper could not join the group: the command never ran


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, super options) of every cgroup mount this process sees."""
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            out.append((fields[4].replace("\\040", " "), tail[0], set(tail[2].split(","))))
    return out


def _own() -> dict[str, str]:
    """This process's group per v1 controller, and '' for the v2 hierarchy (/proc/self/cgroup)."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for c in parts[1].split(",") if parts[1] else [""]:
            out[c] = parts[2]
    return out


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _mkdir(path: Path) -> None:
    path.mkdir()


def _candidates() -> tuple[list[tuple[str, dict[str, Path]]], str]:
    """The hierarchies a learner's group could be made in, v2 first ([(version, controller → this
    process's group folder)]), and why each other one cannot be used."""
    if not os.path.isdir("/sys/fs/cgroup"):
        return [], "no cgroup filesystem here (/sys/fs/cgroup)"
    mounts, own = _mounts(), _own()
    out: list[tuple[str, dict[str, Path]]] = []
    why = []
    for point, kind, _ in mounts:
        if kind != "cgroup2":
            continue
        top = Path(point) / own.get("", "/").lstrip("/")
        have = set(_read(top / "cgroup.controllers").split())
        if {"memory", "pids"} <= have and os.access(top, os.W_OK):
            out.append(("v2", {"": top}))
        else:
            why.append(f"the v2 hierarchy at {point} delegates {', '.join(sorted(have)) or 'no controller'}"
                       + ("" if os.access(top, os.W_OK) else " and is not writable by this user"))
    found: dict[str, Path] = {}
    for c in CONTROLLERS:
        for point, kind, opts in mounts:
            if kind == "cgroup" and c in opts:
                found[c] = Path(point) / own.get(c, "/").lstrip("/")
                break
    missing = [c for c in CONTROLLERS if c not in found]
    not_ours = [c for c, p in found.items() if not os.access(p, os.W_OK)]
    if missing:
        why.append(f"no v1 {', '.join(missing)} hierarchy mounted")
    elif not_ours:
        why.append(f"the v1 {', '.join(not_ours)} hierarchy is not writable by this user")
    else:
        out.append(("v1", found))
    return out, "; ".join(why)


@dataclass
class Group:
    """One learner's group: its folder in each hierarchy ('' for v2's one)."""

    version: str
    folders: dict[str, Path]
    memory_bytes: int | None = None
    processes: int | None = None
    cpus: float | None = None

    def procs_files(self) -> list[str]:
        return [str(f / "cgroup.procs") for f in self.folders.values()]

    def wrap(self, cmd: list[str]) -> list[str]:
        """`cmd`, started so that it is in this group before it runs (see the module's docstring)."""
        files = self.procs_files()
        return ["/bin/sh", "-c", JOIN, "perflab-join", str(len(files)), *files, *cmd]

    def pids(self) -> list[int]:
        out: set[int] = set()
        for f in self.procs_files():
            out |= {int(x) for x in _read(Path(f)).split() if x.isdigit()}
        return sorted(out)

    def kill(self, wait_s: float = 5.0) -> None:
        """SIGKILL every process in the group (all were started for this learner), until none is left."""
        kill_file = self.folders.get("", Path("/nonexistent")) / "cgroup.kill"
        deadline = time.monotonic() + wait_s
        while True:
            pids = self.pids()
            if not pids:
                return
            if kill_file.exists():
                with contextlib.suppress(OSError):
                    _write(kill_file, "1")
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)

    def hit_memory_limit(self) -> bool:
        """Whether the kernel killed a process of the group for its memory limit."""
        if self.version == "v2":
            text = _read(self.folders[""] / "memory.events")
        else:
            text = _read(self.folders["memory"] / "memory.oom_control")
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit() and int(value) > 0:
                return True
        return False

    def close(self) -> None:
        """Kill what is left, then remove the group's folders (never raises)."""
        with contextlib.suppress(Exception):
            self.kill()
        for f in self.folders.values():
            for _ in range(50):
                try:
                    f.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)

    def describe(self) -> str:
        parts = []
        if self.memory_bytes:
            parts.append(f"memory {self.memory_bytes / 2**30:.1f} GiB with its children, tmpfs and page cache")
        if self.processes:
            parts.append(f"{self.processes} processes and threads")
        if self.cpus:
            parts.append(f"{self.cpus:g} CPU{'s' if self.cpus != 1 else ''}")
        return f"cgroup {self.version}: " + ", ".join(parts)


@dataclass
class Cgroups:
    """The folder(s) under which one grading makes its learners' groups."""

    version: str
    parents: dict[str, Path]

    @classmethod
    def make(cls) -> Cgroups | None:
        """This grading's parent group(s), or None where none can be made here (`why()` says why)."""
        name = f"perflab-grade-{os.getpid()}-{time.monotonic_ns() % 10**9}"
        for version, roots in _candidates()[0]:
            parents: dict[str, Path] = {}
            try:
                for c, top in roots.items():
                    parents[c] = top / name
                    _mkdir(parents[c])
                if version == "v2":
                    wanted = [c for c in CONTROLLERS if c in _read(roots[""] / "cgroup.controllers").split()]
                    sub = roots[""] / "cgroup.subtree_control"
                    if not {"memory", "pids"} <= set(_read(sub).split()):
                        _write(sub, " ".join(f"+{c}" for c in wanted))
                    _write(parents[""] / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
            except OSError:
                for p in parents.values():
                    with contextlib.suppress(OSError):
                        p.rmdir()
                continue
            return cls(version, parents)
        return None

    def learner(self, index: int, *, memory_bytes: int | None, processes: int | None,
                cpus: float | None) -> Group | None:
        """A new group for one learner, its limits set; None where it cannot be made."""
        folders = {c: p / f"learner{index}" for c, p in self.parents.items()}
        group = Group(self.version, folders, memory_bytes, processes, cpus)
        try:
            for f in folders.values():
                _mkdir(f)
            if self.version == "v2":
                f = folders[""]
                if memory_bytes:
                    _write(f / "memory.max", str(memory_bytes))
                    if (f / "memory.swap.max").exists():
                        _write(f / "memory.swap.max", "0")
                if processes:
                    _write(f / "pids.max", str(processes))
                if cpus and (f / "cpu.max").exists():
                    _write(f / "cpu.max", f"{int(cpus * 100_000)} 100000")
            else:
                if memory_bytes:
                    _write(folders["memory"] / "memory.limit_in_bytes", str(memory_bytes))
                    with contextlib.suppress(OSError):  # no swap accounting on this kernel: nothing to cap
                        _write(folders["memory"] / "memory.memsw.limit_in_bytes", str(memory_bytes))
                if processes:
                    _write(folders["pids"] / "pids.max", str(processes))
                if cpus:
                    _write(folders["cpu"] / "cpu.cfs_period_us", "100000")
                    _write(folders["cpu"] / "cpu.cfs_quota_us", str(int(cpus * 100_000)))
        except OSError:
            group.close()
            return None
        return group

    def close(self) -> None:
        """Remove the parent folders (their learners' groups closed first); never raises."""
        for p in self.parents.values():
            with contextlib.suppress(OSError):
                for child in p.iterdir():
                    if child.is_dir():
                        Group(self.version, {"": child}).close()
            with contextlib.suppress(OSError):
                p.rmdir()


@functools.cache
def why() -> str:
    """Why no learner's group can be made here: each hierarchy's reason ('' when one can be)."""
    found, reasons = _candidates()
    return "" if found else reasons
