"""Tests of `perflab.distributed.workers.collectives`."""

from __future__ import annotations


def test_listening_addresses_skips_processes_it_may_not_read(monkeypatch):
    import psutil

    from perflab.distributed.workers import collectives as worker

    def denied(pid):
        raise psutil.AccessDenied(pid)

    monkeypatch.setattr(psutil, "Process", denied)
    assert worker.listening_addresses() == []
