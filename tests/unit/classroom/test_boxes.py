"""Tests of `perflab.classroom.boxes`: a learner's folder, read bounded and removed without recursion."""

from __future__ import annotations

import os
import subprocess
import sys

from perflab.classroom import boxes
from perflab.classroom.boxes import Box, Tail, read_capped, remove_tree


def test_a_tree_deeper_than_pythons_recursion_is_removed_and_nothing_a_link_points_to(tmp_path):
    keep = tmp_path / "keep.txt"
    keep.write_text("the grader's")
    top = tmp_path / "box"
    top.mkdir()
    here = os.getcwd()
    try:
        os.chdir(top)
        for _ in range(sys.getrecursionlimit() + 200):
            os.mkdir("d")
            os.chdir("d")
        os.symlink(keep, "link")
        os.mkdir("locked")
        os.chmod("locked", 0)
    finally:
        os.chdir(here)
    (top / "to-outside").symlink_to(tmp_path)
    assert remove_tree(top) is True and not top.exists()
    assert keep.read_text() == "the grader's"
    assert remove_tree(tmp_path / "missing") is True


def test_a_file_is_read_only_as_a_regular_file_and_only_up_to_its_cap(tmp_path):
    (tmp_path / "notes").write_bytes(b"a" * 100 + b"END")
    assert read_capped(tmp_path / "notes", 3) == b"END" and read_capped(tmp_path / "notes", 3, tail=False) == b"aaa"
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "lib").symlink_to(sys.executable)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    for name in ("zero", "lib", "fifo", "folder", "missing"):
        assert read_capped(tmp_path / name, 10) is None, name


def test_a_box_is_a_sized_tmpfs_where_the_grader_may_mount_one():
    box = Box.make("perflab-test-", 4 * 2**20)
    try:
        if box.size_bytes is None:
            assert not boxes.can_mount()
            return
        with open(box.path / "fill", "wb") as f:
            try:
                for _ in range(8):
                    f.write(b"x" * 2**20)
                    f.flush()
                raise AssertionError("wrote past the quota")
            except OSError as e:
                assert e.errno == 28  # ENOSPC
    finally:
        assert box.close() is True
    assert not box.path.exists()


def test_a_tail_keeps_the_last_bytes_of_what_a_process_prints():
    tail = Tail(16)
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdout.write('x' * 10**6 + 'the end')"],
                            stdout=tail.fd)
    tail.close_writer()
    proc.wait()
    assert tail.text().endswith("the end") and len(tail.data()) == 16
