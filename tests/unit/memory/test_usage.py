"""Tests of `perflab.memory.usage`."""

from __future__ import annotations

from perflab.memory import usage


def test_without_proc_there_is_no_peak_rss_and_no_reset(monkeypatch):
    def no_proc(path, *a, **kw):
        raise FileNotFoundError(2, "No such file or directory", path)

    monkeypatch.setattr(usage, "open", no_proc, raising=False)  # as on macOS: no /proc/self
    assert usage.rss_peak_bytes() is None
    assert usage.reset_rss_peak() is False


def test_this_process_has_a_resident_set():
    rss = usage.rss_bytes()
    assert rss is None or rss > 2**20  # None only without psutil
