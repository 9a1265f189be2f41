"""Every process a torchrun job started, found and stopped.

torchrun starts in a session of its own and puts its ranks in sessions of their own, so the
launcher tracks each rank by pid (`track`: the agents' descendants, and the pids the ranks wrote in
the run's folder), asks a hung rank for its Python stack just before the deadline (`dump_stacks`:
SIGUSR1, which `perflab.distributed.workers.runtime` routes to faulthandler), and stops them all
(`stop`: SIGTERM, then SIGKILL a second later).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol


class Process(Protocol):
    """What `launch` needs of an agent: a subprocess.Popen or a perflab.distributed.agent.ForkedAgent."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | Any: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int | Any: ...


def track(procs: list[Process], run_dir: Path, tracked: dict[int, Any]) -> None:
    """Remember every descendant of the agents (ranks live in sessions of their own)."""
    import psutil

    for p in procs:
        try:
            for child in psutil.Process(p.pid).children(recursive=True):
                tracked.setdefault(child.pid, child)
        except psutil.Error:
            pass
    for where in run_dir.glob("rank*.where.json"):
        try:
            pid = int(json.loads(where.read_text())["pid"])
        except (OSError, ValueError, KeyError):
            continue
        if pid not in tracked:
            try:
                tracked[pid] = psutil.Process(pid)
            except psutil.Error:
                pass


def dump_stacks(run_dir: Path, tracked: dict[int, Any], *, sleep: Callable[[float], None] = time.sleep) -> None:
    """Ask every still-running rank that registered faulthandler (runtime.join) to print its stack, then
    give them `sleep(0.3)` to write it."""
    import psutil

    pids = set()
    for where in run_dir.glob("rank*.where.json"):
        try:
            pids.add(int(json.loads(where.read_text())["pid"]))
        except (OSError, ValueError, KeyError):
            continue
    for pid in pids:
        proc = tracked.get(pid)
        if proc is None or not hasattr(signal, "SIGUSR1"):
            continue
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                proc.send_signal(signal.SIGUSR1)
        except psutil.Error:
            pass
    sleep(0.3)


def stop(procs: list[Process], tracked: dict[int, Any]) -> None:
    """SIGTERM every agent's process group and every tracked rank, then SIGKILL what is left."""
    import psutil

    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        signal_group(p.pid, signal.SIGTERM)
    for proc in list(tracked.values()):
        try:
            proc.terminate()
        except psutil.Error:
            pass
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and (any(p.poll() is None for p in procs) or any_alive(tracked)):
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            signal_group(p.pid, signal.SIGKILL)
    for proc in list(tracked.values()):
        try:
            if proc.is_running():
                proc.kill()
        except psutil.Error:
            pass
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not fail
            pass
    psutil.wait_procs(list(tracked.values()), timeout=2)


def signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def any_alive(tracked: dict[int, Any]) -> bool:
    import psutil

    for proc in tracked.values():
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            continue
    return False

