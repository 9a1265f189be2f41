"""One device, many learners: measurements on a device take turns through a file lock.

    with device_lock("cuda:0", label="matmul 4096³"):
        ...time something...

Thirty learners on one GPU box, each dragging a slider, would otherwise time their kernels at the
same moment and each see a fraction of the device without knowing it. Every real measurement
(`perflab.core.timing.bench`, the timed training steps of `perflab.workload.train.StepRunner.run` and
of the ladder, a DataLoader's timed loop, a profiled run, and jobs started by
`perflab.distributed.torchrun.launch`) holds the lock of the device it measures; predictions never
take it.

* The lock is `fcntl.flock` on a file in a shared folder: `PERFLAB_LOCK_DIR`, by default
  `<system temp folder>/perflab-locks`, created with mode 1777 (like /tmp: every user may create
  lock files in it, nobody may delete another's). Lock files are created readable and writable by
  everyone, so learners with their own Unix accounts (JupyterHub) share them.
* The kernel releases an flock when the process holding it dies, however it dies (a killed
  notebook kernel, kill -9, a crash): a lock is never left behind. The file itself stays; it is
  only a name to lock.
* A GPU's lock is named after its UUID when torch reports one, so two users whose
  CUDA_VISIBLE_DEVICES number the same GPU differently still share one lock.
* Re-entrant: a measurement inside a measurement (a bench inside a locked torchrun job, or its
  ranks, which inherit `PERFLAB_LOCK_HELD`) does not wait for itself.
* While it waits, a readout says so on **one line that rewrites itself**: "waiting for cpu: another
  measurement of yours is running, 3 s", then "cpu: waited 7.0 s for the device; measuring now" and,
  when the turn ends, "cpu: waited 7.0 s for the device, measured 3.2 s". In a notebook the line is
  one output of the cell, updated in place, and every turn the cell waits for adds to it ("cpu:
  waited 334 s for the device over 21 turns, measured 71 s"); on a terminal it is redrawn with a
  carriage return; elsewhere (a log, a pipe) it is one line when a wait starts and one when its turn
  ends. `turns()` adds up both over the process, and `turns_line()` says it in one line: time spent
  waiting, apart from time spent measuring.
* Who holds the lock is only ever "another learner's measurement" (another user) or "another
  measurement of yours" (this user's other kernel, command or job): the shared lock file records the
  holder's numeric uid, pid and start time, nothing else, and the text shown is built from fixed words
  alone. No process id, command, program or model is ever shown, not even one's own.
* `PERFLAB_LOCK=off` turns it off (a box with one user, or measurements meant to collide).

What it cannot do: it gives turns, not isolation. Something that does not go through perflab
(another framework, a training job) is not held back, and a learner's own long measurement makes
the others wait. Separate GPUs, or MIG slices of one GPU, give isolation.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from perflab.core.errors import PerflabError

HELD_ENV = "PERFLAB_LOCK_HELD"  # set while this process holds a lock; its children skip locking
POLL_S = 0.05
FIRST_NOTE_S = 1.0  # a wait shorter than this says nothing


class LockTimeout(PerflabError):
    """The device stayed busy for longer than the caller would wait."""


_held: dict[str, int] = {}  # lock key -> depth, in this process
_guard = threading.RLock()


def enabled() -> bool:
    return os.environ.get("PERFLAB_LOCK", "on").strip().lower() not in {"0", "off", "no", "false"}


def lock_dir() -> Path:
    """The shared folder of lock files, created world-writable with the sticky bit (mode 1777)."""
    path = Path(os.environ.get("PERFLAB_LOCK_DIR") or Path(tempfile.gettempdir()) / "perflab-locks")
    if not path.is_dir():
        try:
            path.mkdir(parents=True, exist_ok=True)
            os.chmod(path, 0o1777)  # mkdir's mode is cut by the umask; chmod is not
        except OSError as e:
            raise PerflabError(f"cannot create the lock folder {path} ({e.strerror}): "
                               "set PERFLAB_LOCK_DIR to a folder every user can write") from None
    return path


def device_key(device: object) -> str:
    """The lock's name for a device: 'cpu', 'mps', 'cuda-<uuid>' (or 'cuda-<index>')."""
    text = str(device)
    if text.startswith("cuda"):
        index = int(text.split(":")[1]) if ":" in text else 0
        with contextlib.suppress(Exception):
            import torch

            if torch.cuda.is_available():
                if ":" not in text:
                    index = torch.cuda.current_device()
                uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
                if uuid:
                    return f"cuda-{uuid}"
        return f"cuda-{index}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text.split(":")[0])  # one CPU, one MPS device per machine


def _open(path: Path) -> int:
    """Open the lock file, creating it readable and writable by everyone. An existing file is opened
    without O_CREAT: Linux's protected_regular refuses O_CREAT on another user's file in a sticky folder."""
    for _ in range(5):
        try:
            return os.open(path, os.O_RDWR)
        except FileNotFoundError:
            pass
        except PermissionError:
            return os.open(path, os.O_RDONLY)  # flock works on a read-only descriptor too
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
            with contextlib.suppress(OSError):
                os.fchmod(fd, 0o666)
            return fd
        except FileExistsError:
            continue  # someone created it meanwhile: open theirs
    raise PerflabError(f"cannot open the lock file {path}: set PERFLAB_LOCK_DIR to a folder every user can write")


def _uid() -> int | None:
    getuid = getattr(os, "getuid", None)
    return getuid() if getuid is not None else None


def holder(path: Path) -> str:
    """Who holds the lock, in fixed words: "another measurement of yours" when the holder runs as this
    user, "another learner's measurement" when it does not, "another measurement" when unknown. Never
    a name, a process id, a command or a model (the shared file does not even hold them)."""
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "another measurement"
    if not isinstance(info, dict) or "uid" not in info:
        return "another measurement"
    if info.get("uid") != _uid() or _uid() is None:
        return "another learner's measurement"
    return "another measurement of yours"


_turns = {"waited_s": 0.0, "measured_s": 0.0, "turns": 0}


def turns() -> dict[str, float]:
    """Seconds this process spent waiting for devices' locks and holding them (measuring), and how
    many turns it took, since it started (outermost locks only)."""
    return dict(_turns)


def turns_line(since: dict[str, float] | None = None) -> str:
    """'waited 28 s for the device, measured 41 s' since `since` (a `turns()` taken before), or ''
    when nothing waited."""
    now = turns()
    base = since or {"waited_s": 0.0, "measured_s": 0.0, "turns": 0}
    waited = now["waited_s"] - base["waited_s"]
    measured = now["measured_s"] - base["measured_s"]
    if waited < FIRST_NOTE_S:
        return ""
    return f"waited {_secs(waited)} for the device, measured {_secs(measured)}"


def _secs(s: float) -> str:
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def _in_kernel() -> bool:
    """True inside a Jupyter kernel (IPython's ZMQ shell is running), not merely when ipykernel was
    imported: a process that imported it and then runs `perflab ... --json` must keep stdout clean."""
    return _kernel_shell() is not None


def _kernel_shell() -> object | None:
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None
    except Exception:  # an IPython half imported: not a kernel
        return None
    return shell if shell is not None and type(shell).__name__ == "ZMQInteractiveShell" else None


class Readout(Protocol):
    """Where a wait is said: `waiting` while it waits (about once a second), `measuring` when the turn
    begins, `done` when it ends."""

    def waiting(self, name: str, who: str, waited_s: float) -> None: ...

    def measuring(self, name: str, who: str, waited_s: float) -> None: ...

    def done(self, name: str, waited_s: float, measured_s: float) -> None: ...


class Lines:
    """A readout for a `say(text, final)` function: each message is one line of text (the caller
    decides what to do with them; tests collect them)."""

    def __init__(self, say: Callable[[str, bool], None]) -> None:
        self.say = say

    def waiting(self, name: str, who: str, waited_s: float) -> None:
        self.say(f"waiting for {name}: {who} is running, {waited_s:.0f} s", False)

    def measuring(self, name: str, who: str, waited_s: float) -> None:
        self.say(f"{name}: waited {_secs(waited_s)} for the device; measuring now", False)

    def done(self, name: str, waited_s: float, measured_s: float) -> None:
        self.say(f"{name}: waited {_secs(waited_s)} for the device, measured {_secs(measured_s)}", True)


class WaitLine:
    """The default readout: one line that rewrites itself (module docstring).

    In a notebook the line is a display output of the running cell, updated in place; the waits of one
    cell (one execution: its parent message) add up on it. On a terminal (stderr is a tty) it is redrawn
    with a carriage return and ended when the turn ends. Elsewhere (a log, a pipe) a wait is one line
    when it starts and one when its turn ends. Outside a kernel everything goes to stderr, so that
    `--json` output stays clean."""

    def __init__(self, stream: Any = None) -> None:
        self._stream = stream
        self._cell: object = None  # the cell execution the kernel line belongs to
        self._handle: Any = None
        self._cell_waited = 0.0
        self._cell_measured = 0.0
        self._cell_turns = 0
        self._drawn = 0  # characters of the terminal line drawn so far
        self._started = False  # this wait's first line was written (a log's)

    # -------------------------------------------------------------- where the line goes
    def _kernel_key(self) -> object | None:
        shell = _kernel_shell()
        if shell is None:
            return None
        with contextlib.suppress(Exception):
            parent = getattr(shell, "parent_header", None) or {}
            msg = (parent.get("header") or {}).get("msg_id")
            if msg:
                return msg
        return getattr(shell, "execution_count", 0)

    def _show(self, text: str, final: bool) -> None:
        key = self._kernel_key()
        if key is not None and self._stream is None:
            self._show_in_kernel(key, text)
            return
        stream = self._stream or sys.stderr
        text = text.replace("\r", " ").replace("\n", " ")
        if getattr(stream, "isatty", lambda: False)():
            pad = max(0, self._drawn - len(text))
            stream.write("\r" + text + " " * pad + ("\n" if final else ""))
            self._drawn = 0 if final else len(text)
        elif final or not self._started:
            stream.write(text + "\n")
            self._started = not final
        stream.flush()

    def _show_in_kernel(self, key: object, text: str) -> None:
        from IPython.display import DisplayHandle

        if key != self._cell or self._handle is None:
            self._cell, self._handle = key, DisplayHandle()
            self._cell_waited = self._cell_measured = 0.0
            self._cell_turns = 0
            self._handle.display({"text/plain": text}, raw=True)
        else:
            self._handle.update({"text/plain": text}, raw=True)

    # -------------------------------------------------------------- what it says
    def _before(self, key: object | None) -> str:
        """In a kernel, what this cell waited in its earlier turns: ' (this cell: 80 s over 4 turns)'."""
        if key is None or key != self._cell or not self._cell_turns:
            return ""
        return (f" (this cell so far: waited {_secs(self._cell_waited)} over {self._cell_turns} "
                f"turn{'s' if self._cell_turns != 1 else ''})")

    def waiting(self, name: str, who: str, waited_s: float) -> None:
        key = self._kernel_key() if self._stream is None else None
        self._show(f"waiting for {name}: {who} is running, {waited_s:.0f} s{self._before(key)}", False)

    def measuring(self, name: str, who: str, waited_s: float) -> None:
        key = self._kernel_key() if self._stream is None else None
        if key is None and not getattr(self._stream or sys.stderr, "isatty", lambda: False)():
            return  # a log gets the wait's start and its end, nothing between
        self._show(f"{name}: waited {_secs(waited_s)} for the device; measuring now{self._before(key)}", False)

    def done(self, name: str, waited_s: float, measured_s: float) -> None:
        key = self._kernel_key() if self._stream is None else None
        if key is not None and key == self._cell:
            self._cell_waited += waited_s
            self._cell_measured += measured_s
            self._cell_turns += 1
            if self._cell_turns > 1:
                self._show(f"{name}: waited {_secs(self._cell_waited)} for the device over {self._cell_turns} turns, "
                           f"measured {_secs(self._cell_measured)}", True)
                return
        self._show(f"{name}: waited {_secs(waited_s)} for the device, measured {_secs(measured_s)}", True)


_readout: WaitLine | None = None


def _default_readout() -> WaitLine:
    global _readout
    if _readout is None:
        _readout = WaitLine()
    return _readout


def _held_by_parent() -> bool:
    """A process that started this one holds the locks (this is its torchrun rank, DataLoader worker
    or child command): measure under its turn. A lock this process holds itself does not count, so
    that `devices_lock` takes every device's lock, not only the first."""
    held = os.environ.get(HELD_ENV, "")
    return bool(held) and not held.startswith(f"{os.getpid()}:")


@contextlib.contextmanager
def device_lock(device: object = "cpu", *, label: str = "", timeout: float | None = None,
                say: Callable[[str, bool], None] | None = None) -> Iterator[float]:
    """Hold `device`'s lock for the body; yields the seconds it waited. Several devices: nest them
    in a fixed order (see `devices_lock`). `label` names what is measured, for the caller's own records:
    it is never written where another process could read it, nor shown. `say(text, final)` receives
    the waiting readout's lines instead of the one updating line (`WaitLine`)."""
    if not enabled() or _held_by_parent():
        yield 0.0
        return
    key = device_key(device)
    with _guard:
        if _held.get(key):
            _held[key] += 1
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield 0.0
        finally:
            with _guard:
                _held[key] -= 1
        return

    try:
        import fcntl

        path = lock_dir() / f"perflab-{key}.lock"
        fd = _open(path)
    except (ImportError, PerflabError) as e:  # no flock (Windows), or no folder to share: measure, and say so once
        _warn_once(f"measuring without taking turns: {e}")
        yield 0.0
        return
    t0 = time.monotonic()
    waited = 0.0
    noted = False
    name = str(device)
    out: Readout = Lines(say) if say is not None else _default_readout()
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            waited = time.monotonic() - t0
            if timeout is not None and waited >= timeout:
                raise LockTimeout(f"{name} stayed busy for {waited:.0f} s ({holder(path)} is running): "
                                  "try again when it ends")
            if waited >= FIRST_NOTE_S and (not noted or int(waited) != int(waited - POLL_S)):
                out.waiting(name, holder(path), waited)  # about once a second: the line rewrites itself
                noted = True
            time.sleep(POLL_S)
        waited = time.monotonic() - t0
        if noted:
            out.measuring(name, holder(path), waited)
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"uid": _uid(), "pid": os.getpid(), "since": time.time()}).encode(), 0)
        with _guard:
            _held[key] = 1
        before = os.environ.get(HELD_ENV)
        os.environ[HELD_ENV] = f"{os.getpid()}:{key}"
        t1 = time.monotonic()
        try:
            yield waited
        finally:
            measured = time.monotonic() - t1
            if before is None:
                os.environ.pop(HELD_ENV, None)
            else:
                os.environ[HELD_ENV] = before
            with _guard:
                _held.pop(key, None)
                _turns["waited_s"] += waited
                _turns["measured_s"] += measured
                _turns["turns"] += 1
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            if noted:
                out.done(name, waited, measured)
    finally:
        os.close(fd)  # closing the descriptor releases the flock


@contextlib.contextmanager
def devices_lock(devices: list[str], *, label: str = "", timeout: float | None = None) -> Iterator[None]:
    """Hold several devices' locks (a multi-GPU job), always taken in the same order so that two
    jobs cannot each hold one and wait for the other."""
    with contextlib.ExitStack() as stack:
        for dev in sorted(set(devices), key=device_key):
            stack.enter_context(device_lock(dev, label=label, timeout=timeout))
        yield


_warned: set[str] = set()


def _warn_once(text: str) -> None:
    if text not in _warned:
        _warned.add(text)
        sys.stderr.write(f"perflab: {text}\n")
