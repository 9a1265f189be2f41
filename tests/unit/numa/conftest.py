"""Fixtures the tests of this folder share."""

import os

import pytest


@pytest.fixture
def fake_numactl(tmp_path, monkeypatch):
    """A numactl that drops its binding options and runs the command: the plumbing around it is
    what is under test on a one-node machine, not the binding."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "numactl"
    script.write_text('#!/bin/sh\necho "numactl $*" >> "$NUMACTL_LOG"\n'
                      'while [ $# -gt 0 ]; do case "$1" in --*) shift;; *) break;; esac; done\nexec "$@"\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NUMACTL_LOG", str(tmp_path / "numactl.log"))
    return tmp_path / "numactl.log"
