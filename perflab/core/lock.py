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
* While it waits, a readout says so, one line per message: "waiting for cuda:0: another learner's
  measurement is running, 3 s", then "waited 7 s for cuda:0: …; measuring now" and, when the turn
  ends, "cuda:0: waited 7 s for the device, measured 3.2 s". `turns()` adds up both over the process,
  and `turns_line()` says it in one line: time spent waiting, apart from time spent measuring.
* Another user's measurement is only ever "another learner's measurement": the shared lock file
  records the holder's numeric uid, pid and start time, nothing else, and the text shown is built
  from fixed words unless the holder is the reader's own uid. Then the label (what is measured)
  comes from a file only that user can read (`<lock>.<uid>.mine`, mode 0600), so a learner sees
  "your own measurement (pid 1234: matmul 1024³)" and never anyone else's user name, command or model.
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

from perflab.core.errors import PerflabError

HELD_ENV = "PERFLAB_LOCK_HELD"  # set while this process holds a lock; its children skip locking
POLL_S = 0.05
FIRST_NOTE_S = 1.0  # a wait shorter than this says nothing
NOTE_EVERY_S = 10.0  # while waiting, a line every this many seconds


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


def _mine(path: Path) -> Path:
    """The holder's private note of what it measures, readable by its own user only."""
    return path.with_name(f"{path.name}.{_uid()}.mine")


def _write_mine(path: Path, label: str) -> None:
    note = _mine(path)
    with contextlib.suppress(OSError):
        fd = os.open(note, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            if os.fstat(fd).st_uid == _uid():  # never write into a file someone else planted
                os.write(fd, json.dumps({"pid": os.getpid(), "label": label}).encode())
        finally:
            os.close(fd)


def _read_mine(path: Path, pid: object) -> str:
    with contextlib.suppress(OSError, ValueError):
        fd = os.open(_mine(path), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            if os.fstat(fd).st_uid != _uid():
                return ""
            info = json.loads(os.read(fd, 4096) or b"{}")
        finally:
            os.close(fd)
        if isinstance(info, dict) and info.get("pid") == pid and isinstance(info.get("label"), str):
            return info["label"][:120]
    return ""


def holder(path: Path) -> str:
    """Who holds the lock, as this user may be told: "your own measurement (pid 1234: matmul 1024³)"
    when the holder runs as this user, else "another learner's measurement" (never their name, command
    or model: the shared file does not even hold them), "another measurement" when unknown."""
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "another measurement"
    if not isinstance(info, dict) or "uid" not in info:
        return "another measurement"
    if info.get("uid") != _uid() or _uid() is None:
        return "another learner's measurement"
    pid = info.get("pid")
    pid_text = f"pid {int(pid)}" if isinstance(pid, int) else "another process"
    label = _read_mine(path, pid)
    return f"your own measurement ({pid_text}{': ' + label if label else ''})"


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
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None
    except Exception:  # an IPython half imported: not a kernel
        return False
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _say_default() -> Callable[[str, bool], None]:
    """Where the waiting readout goes: the notebook's output (stdout) in a kernel, stderr elsewhere
    (so that `--json` output stays clean). Every message is a line of its own, never redrawn over an
    earlier one (a shorter line drawn over a longer one leaves the longer one's end behind); while
    waiting, one line at the first second and then one every `NOTE_EVERY_S` seconds."""
    stream = sys.stdout if _in_kernel() else sys.stderr
    last = [-1e9]

    def say(text: str, final: bool) -> None:
        now = time.monotonic()
        if final or now - last[0] >= NOTE_EVERY_S:
            stream.write(text.replace("\r", " ").replace("\n", " ") + "\n")
            last[0] = now
            stream.flush()

    return say


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
    in a fixed order (see `devices_lock`)."""
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
                say = say or _say_default()
                say(f"waiting for {name}: {holder(path)} is running, {waited:.0f} s", False)
                noted = True
            time.sleep(POLL_S)
        waited = time.monotonic() - t0
        if noted and say is not None:
            say(f"waited {waited:.0f} s for {name}: {holder(path)} was running; measuring now", True)
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"uid": _uid(), "pid": os.getpid(), "since": time.time()}).encode(), 0)
        _write_mine(path, label)
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
            if noted and say is not None:
                say(f"{name}: waited {_secs(waited)} for the device, measured {_secs(measured)}", True)
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
