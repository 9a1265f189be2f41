"""Tests of `perflab.distributed.processes`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil

from perflab.distributed import processes


def test_track_and_dump_stacks_skip_unreadable_or_vanished_ranks(tmp_path):
    (tmp_path / "rank0.where.json").write_text("{not json")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / "rank1.where.json").write_text(json.dumps({"pid": gone.pid}))
    (tmp_path / "rank2.where.json").write_text(json.dumps({"pid": os.getpid()}))
    tracked: dict = {}
    processes.track([], tmp_path, tracked)
    assert os.getpid() in tracked and (gone.pid not in tracked or psutil.pid_exists(gone.pid))

    class Vanished:
        def is_running(self):
            raise psutil.NoSuchProcess(os.getpid())

    sent = []
    processes.dump_stacks(tmp_path, {os.getpid(): Vanished()}, sleep=sent.append)  # rank 1 is not tracked, rank 2 is gone: no signal
    assert sent == [0.3]


def test_stop_kills_an_agent_that_ignores_sigterm():
    agent_proc = subprocess.Popen(["sh", "-c", "trap '' TERM; echo ready; sleep 30 & wait"], start_new_session=True,
                                  stdout=subprocess.PIPE, text=True)
    try:
        assert agent_proc.stdout is not None and agent_proc.stdout.readline().strip() == "ready"
        processes.stop([agent_proc], {})  # SIGTERM to its group, a second's grace, then SIGKILL
        assert agent_proc.poll() == -signal.SIGKILL
    finally:
        if agent_proc.poll() is None:
            agent_proc.kill()
        agent_proc.wait()
        if agent_proc.stdout is not None:
            agent_proc.stdout.close()


def test_stop_kills_a_rank_that_ignores_sigterm():
    rank = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                             "print('ready', flush=True); time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    short = subprocess.Popen(["sleep", "30"])
    try:
        assert rank.stdout is not None and rank.stdout.readline().strip() == "ready"

        class Vanishing(psutil.Process):  # exits between the launcher's look and its kill
            def status(self):
                raise psutil.NoSuchProcess(self.pid)

            def kill(self):
                raise psutil.NoSuchProcess(self.pid)

        tracked = {short.pid: Vanishing(short.pid), rank.pid: psutil.Process(rank.pid)}
        processes.stop([], tracked)
        assert not tracked[rank.pid].is_running()  # killed, and reaped by stop
    finally:
        for p in (rank, short):
            if p.poll() is None:
                p.kill()
            p.wait()
        if rank.stdout is not None:
            rank.stdout.close()


def test_signal_group_of_a_finished_job_is_no_error():
    done = subprocess.Popen(["true"], start_new_session=True)
    done.wait()
    processes.signal_group(done.pid, 0)  # its group is gone (signal 0 only asks whether it exists)
