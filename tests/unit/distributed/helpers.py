"""Helpers the tests of this folder share."""


import psutil

from perflab.distributed.torchrun import BackendChoice

GLOO = BackendChoice("gloo", "cpu", "test")


def assert_all_gone(res):
    alive = []
    for pid in res.pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append((pid, p.name()))
        except psutil.NoSuchProcess:
            pass
    assert not alive, f"left running: {alive}"
