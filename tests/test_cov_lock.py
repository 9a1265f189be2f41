"""The device lock's edges: a lock file another user owns, a file created at the same moment by
someone else, a folder nobody can use, a holder record that is not JSON, and no user name."""

from __future__ import annotations

import os

import pytest

from perflab.core import lock
from perflab.core.errors import PerflabError


def test_a_lock_file_this_user_cannot_write_is_opened_read_only(tmp_path, monkeypatch):
    real = os.open
    modes = []

    def opener(path, flags, *a):
        modes.append(flags & (os.O_RDWR | os.O_WRONLY))
        if flags & os.O_RDWR:
            raise PermissionError(13, "Permission denied")
        return real(path, flags, *a)

    (tmp_path / "x.lock").write_text("")
    monkeypatch.setattr(lock.os, "open", opener)
    fd = lock._open(tmp_path / "x.lock")
    os.close(fd)
    assert modes == [os.O_RDWR, 0]  # read-write refused, then read-only: flock works on either


def test_a_file_created_meanwhile_is_opened_and_a_hopeless_folder_is_one_line(tmp_path, monkeypatch):
    real = os.open
    calls = []

    def racing(path, flags, *a):
        calls.append(flags)
        if flags & os.O_EXCL:
            if len(calls) < 3:
                raise FileExistsError(17, "File exists")  # another process won the race
        elif len(calls) < 3:
            raise FileNotFoundError(2, "No such file")
        return real(path, flags | os.O_CREAT, 0o666)

    monkeypatch.setattr(lock.os, "open", racing)
    os.close(lock._open(tmp_path / "y.lock"))
    assert len(calls) == 3

    def never(path, flags, *a):
        raise FileExistsError(17, "File exists") if flags & os.O_EXCL else FileNotFoundError(2, "gone")

    monkeypatch.setattr(lock.os, "open", never)
    with pytest.raises(PerflabError, match="cannot open the lock file .*: set PERFLAB_LOCK_DIR to a folder every user can write"):
        lock._open(tmp_path / "z.lock")


def test_holder_of_an_unreadable_record_and_a_user_without_a_name(tmp_path, monkeypatch):
    p = tmp_path / "perflab-cpu.lock"
    p.write_text("{not json")
    assert lock.holder(p) == ""
    assert lock.holder(tmp_path / "missing.lock") == ""

    def no_name():
        raise KeyError("getpwuid(): uid not found: 1234")

    monkeypatch.setattr(lock.getpass, "getuser", no_name)
    assert lock._user() == ""
