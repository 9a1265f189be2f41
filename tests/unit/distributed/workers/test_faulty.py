"""Tests of `perflab.distributed.workers.faulty`."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


def test_faulty_worker_hangs_on_its_rank(one_rank, monkeypatch, capsys):
    from perflab.distributed.workers import faulty

    naps = []

    class Stopped(Exception):
        pass

    def sleep(s):
        naps.append(s)
        if len(naps) > 2:
            raise Stopped  # what the launcher's SIGTERM does to the real rank

    monkeypatch.setattr(faulty, "time", SimpleNamespace(sleep=sleep))  # this module's clock only
    with pytest.raises(Stopped):
        faulty.body(one_rank, raise_on=None, hang_on=0, work_s=0.0)
    assert naps == [0.0, 1.0, 1.0]
    assert "rank 0: stuck (sleeping until stopped)" in capsys.readouterr().out
