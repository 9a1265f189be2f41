"""A learner's writable folder on the grader's side, and how the grader reads from it, drains what
a learner's process prints, and removes what it left: bounded, never following a link, never
raising out of one learner's grading.

    box = Box.make("perflab-grade-", size_bytes=2**30)   # a sized tmpfs where this user may mount one
    data = read_capped(box.path / "executed.ipynb", 2**20)  # None unless a regular file; at most 1 MiB
    log = Tail(2**20); proc = Popen(cmd, stdout=log.fd, ...); log.close_writer(); text = log.text()
    box.close()                                            # unmounted, or removed without recursion

* `Box.make`: a private folder (mode 0700) that is, as root (or with CAP_SYS_ADMIN), a tmpfs of
  `size_bytes`: the learner's disk quota, its pages counted in the learner's memory group too;
  elsewhere a plain folder (each of the learner's files is then capped by RLIMIT_FSIZE only).
* `read_capped`: opened with O_NOFOLLOW and O_NONBLOCK, only a regular file, at most `limit`
  bytes (the last ones by default): a link to a library or `/dev/zero`, a FIFO, a folder named as
  the file read nothing.
* `remove_tree`: no recursion and no deep path, whatever the depth of the tree (a 1,500-deep
  folder made `shutil.rmtree` raise RecursionError): each folder's subfolders are moved up to the
  top, then it is emptied and removed; links are removed, never followed. It never raises.
* `Tail`: a pipe whose reader keeps the last `limit` bytes, for a process's output (no file on
  disk for a learner to fill).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
import sys
import tempfile
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

MS_NOSUID, MS_NODEV = 2, 4
MNT_DETACH = 2


def read_capped(path: Path | str, limit: int, *, tail: bool = True) -> bytes | None:
    """At most `limit` bytes of `path` (its last ones, or its first with tail=False), read only as a
    regular file and never through a symbolic link; None where it is not such a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        start = max(0, st.st_size - limit) if tail else 0
        out = bytearray()
        while len(out) < limit:
            chunk = os.pread(fd, min(limit - len(out), 2**20), start + len(out))
            if not chunk:
                break
            out += chunk
        return bytes(out)
    except OSError:
        return None
    finally:
        os.close(fd)


def remove_tree(top: Path | str) -> bool:
    """Remove `top` and everything under it without recursion (see the module's docstring); True
    when it is gone. Never raises."""
    top = os.fspath(top)
    try:
        st = os.lstat(top)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(top)
            return True
        top_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        for _ in range(3):  # a pass empties everything it can; another one catches what a pass could not
            if _empty(top_fd):
                break
    except Exception:  # noqa: BLE001 - cleanup never stops a class's grading
        pass
    finally:
        os.close(top_fd)
    with contextlib.suppress(OSError):
        os.rmdir(top)
    return not os.path.lexists(top)


def _empty(top_fd: int) -> bool:
    """One pass of `remove_tree` over the folder `top_fd`: True when it is left empty."""
    token = os.urandom(4).hex()
    moved = 0
    todo: list[str | None] = [None]  # None: the top itself; else a folder directly under it
    while todo:
        name = todo.pop()
        try:
            fd = top_fd if name is None else os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                                     dir_fd=top_fd)
        except OSError:
            continue
        try:
            with contextlib.suppress(OSError):
                os.fchmod(fd, 0o700)  # a folder its learner made unreadable or unwritable
            entries: list[tuple[str, bool]] = []
            with contextlib.suppress(OSError), os.scandir(fd) as it:
                entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
            for entry, is_dir in entries:
                if not is_dir:
                    with contextlib.suppress(OSError):
                        os.unlink(entry, dir_fd=fd)
                elif name is None:
                    todo.append(entry)
                else:  # moved up beside it: the tree never gets deeper than two levels
                    moved += 1
                    new = f".perflab-rm-{token}-{moved}"
                    with contextlib.suppress(OSError):
                        os.rename(entry, new, src_dir_fd=fd, dst_dir_fd=top_fd)
                        todo.append(new)
        finally:
            if fd != top_fd:
                os.close(fd)
        if name is not None:
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=top_fd)
        if moved > 10**7:  # more folders than one learner's run can make: give up
            return False
    with os.scandir(top_fd) as it:
        return next(iter(it), None) is None


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def mount_tmpfs(path: Path, size_bytes: int) -> bool:
    """Mount a tmpfs of `size_bytes` (mode 0700) on `path`; False where this process may not."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        rc = _libc().mount(b"tmpfs", os.fsencode(path), b"tmpfs", MS_NOSUID | MS_NODEV,
                           f"size={int(size_bytes)},mode=0700".encode())
    except (OSError, AttributeError):
        return False
    return rc == 0


def can_mount() -> bool:
    """Whether this process may give a learner a sized tmpfs (a trial mount on a fresh folder)."""
    path = Path(tempfile.mkdtemp(prefix="perflab-mount-"))
    try:
        ok = mount_tmpfs(path, 2**20)
        if ok:
            unmount(path)
        return ok
    finally:
        with contextlib.suppress(OSError):
            path.rmdir()


def unmount(path: Path) -> bool:
    try:
        return _libc().umount2(os.fsencode(path), MNT_DETACH) == 0
    except (OSError, AttributeError):
        return False


@dataclass
class Box:
    """A learner's writable folder (see the module's docstring)."""

    path: Path
    size_bytes: int | None = None  # its quota when it is a tmpfs; None: a plain folder

    @classmethod
    def make(cls, prefix: str, size_bytes: int | None = None) -> Box:
        path = Path(tempfile.mkdtemp(prefix=prefix))
        if size_bytes and mount_tmpfs(path, size_bytes):
            return cls(path, size_bytes)
        return cls(path, None)

    def close(self) -> bool:
        """Unmount it (a tmpfs goes at once, whatever it holds) or remove it; True when gone. Never raises."""
        try:
            if self.size_bytes is not None:
                unmount(self.path)
            return remove_tree(self.path)
        except Exception:  # noqa: BLE001 - cleanup never stops a class's grading
            return False


class Tail:
    """A pipe for a process's output: `fd` is its writing end (give it as stdout/stderr), a thread
    reads it and keeps the last `limit` bytes. `close_writer()` once the process has started."""

    def __init__(self, limit: int = 2**20):
        self.limit = limit
        self._chunks: deque[bytes] = deque()
        self._size = 0
        r, self.fd = os.pipe()
        self._reader = threading.Thread(target=self._drain, args=(r,), daemon=True)
        self._reader.start()

    def _drain(self, r: int) -> None:
        try:
            while True:
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                self._chunks.append(chunk)
                self._size += len(chunk)
                while self._size - len(self._chunks[0]) >= self.limit:
                    self._size -= len(self._chunks.popleft())
        except OSError:
            pass
        finally:
            os.close(r)

    def close_writer(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    def data(self, wait_s: float = 2.0) -> bytes:
        """What was kept so far (waiting up to `wait_s` for the writers to be done)."""
        self.close_writer()
        self._reader.join(wait_s)
        return b"".join(list(self._chunks))[-self.limit:]

    def text(self, wait_s: float = 2.0) -> str:
        return self.data(wait_s).decode(errors="replace")
