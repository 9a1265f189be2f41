"""perflab.distributed's launcher, piece by piece in this process: the backend choice on a machine with GPUs
(torch's answers replaced), each one-line message a job can end with, reading what ranks leave in
the run folder, stopping processes that ignore SIGTERM, Ctrl-C during a launch, and the forked agent."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from types import SimpleNamespace

import psutil
import pytest
import torch

from perflab.core.errors import InputError
from perflab.distributed import agent
from perflab.distributed import torchrun as T
from perflab.distributed.torchrun import BackendChoice, DistRunError, LaunchResult, RankOutcome

GLOO = BackendChoice("gloo", "cpu", "test")


def _result(ranks, *, timed_out=False, returncodes=(0,), agent_output="", nproc=None):
    return LaunchResult("perflab.distributed.workers.faulty", nproc or len(ranks), 1, GLOO, [["python", "-m", "x"]], 2.0,
                        30.0, timed_out, list(returncodes), ranks=ranks, agent_output=agent_output)


# ----------------------------------------------------------------------------- backend choice
@pytest.mark.parametrize("gpus, nproc, backend, name, reason", [
    (2, 2, None, "nccl", "2 GPU(s) for 2 ranks: NCCL, one GPU per rank"),
    (2, 4, None, "gloo", "4 ranks but only 2 GPU(s): NCCL needs one GPU per rank"),
    (2, 2, "nccl", "nccl", "asked for nccl: 2 ranks on 2 GPU(s)"),
])
def test_choose_backend_with_gpus(monkeypatch, gpus, nproc, backend, name, reason):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    c = T.choose_backend(nproc, backend)
    assert c.name == name and c.device == ("cuda" if name == "nccl" else "cpu") and c.reason.startswith(reason)


def test_nccl_with_fewer_gpus_than_ranks_says_what_to_use(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(InputError, match="4 ranks but 2 GPU.s. here; use --nproc 2 or --backend gloo"):
        T.choose_backend(4, "nccl")


def test_launch_timeout_must_be_a_number():
    with pytest.raises(InputError, match="timeout must be a number of seconds .got 'soon'."):
        T.launch("perflab.distributed.workers.faulty", 2, timeout="soon")  # pyright: ignore[reportArgumentType]  # the bad input under test


def test_slurm_script_names_the_partition():
    text = T.slurm_script("perflab.distributed.workers.ddp", nodes=2, gpus_per_node=8, partition="gpu")
    assert "#SBATCH --partition=gpu\n" in text and "--nproc-per-node=8" in text


# ----------------------------------------------------------------------------- what a job's result says
def test_timeout_message_when_a_rank_never_started_and_others_finished():
    res = _result([RankOutcome(0, "ok"), RankOutcome(1, "timeout", started=False)], timed_out=True)
    assert res.message == ("rank 1 (it had not started yet: torchrun and `import torch` were still loading) did not "
                           "finish within 30 s; rank 0 had finished; every process was stopped")


def test_messages_when_no_rank_raised():
    assert _result([RankOutcome(0, "ok")], nproc=2).message == "only 1 of 2 ranks started (torchrun exit codes [0])"
    assert _result([RankOutcome(0, "ok"), RankOutcome(1, "unknown")]).message == "rank 1 did not finish (unknown)"
    assert (_result([RankOutcome(0, "ok")], returncodes=[1]).message
            == "torchrun exited with [1] although every rank finished")


def test_report_lists_failed_ranks_first_and_skips_the_ok_ones():
    ranks = [RankOutcome(0, "ok", stdout="fine"), RankOutcome(1, "stopped", stdout="stopped here"),
             RankOutcome(2, "raised", error="ValueError: boom", stderr="Traceback\nValueError: boom", error_time=1.0)]
    res = _result(ranks, returncodes=[1])
    lines = res.report().splitlines()
    assert lines[0] == "rank 2 raised ValueError: boom; rank 1 was stopped"
    assert lines[1] == "--- rank 2: raised (ValueError: boom) ---"
    assert "--- rank 1: stopped ---" in lines and "fine" not in lines
    d = res.as_dict()
    assert d["ok"] is False and d["world_size"] == 3 and d["ranks"][2]["error"] == "ValueError: boom"
    assert d["ranks"][1] == {"rank": 1, "status": "stopped", "exit_code": None, "error": None, "step": None,
                             "where": None, "pid": None, "local_rank": None, "node": None, "output_tail": "stopped here"}


def test_report_shows_torchrun_when_no_rank_started():
    res = _result([], returncodes=[1], nproc=2,
                  agent_output="torchrun: error: unrecognized arguments: --bogus\n")
    assert res.report().splitlines()[1:] == ["--- torchrun ---", "torchrun: error: unrecognized arguments: --bogus"]


def test_raise_for_status_returns_a_good_result():
    res = _result([RankOutcome(0, "ok"), RankOutcome(1, "ok")])
    assert res.raise_for_status() is res


def test_run_worker_raises_with_the_report(monkeypatch):
    bad = _result([RankOutcome(0, "raised", error="ValueError: boom")], returncodes=[1])
    good = _result([RankOutcome(0, "ok")])
    monkeypatch.setattr(T, "launch", lambda *a, **kw: bad)
    with pytest.raises(DistRunError, match="rank 0 raised ValueError: boom") as e:
        T.run_worker("perflab.distributed.workers.faulty", 1)
    assert e.value.result is bad
    monkeypatch.setattr(T, "launch", lambda *a, **kw: good)
    assert T.run_worker("perflab.distributed.workers.faulty", 1) is good


# ----------------------------------------------------------------------------- reading the run folder
def test_outcomes_from_torchrun_exit_codes_alone(tmp_path):
    summary = ("  rank      : 0 (local_rank: 0)\n  exitcode  : 0 (pid: 11)\n"
               "  rank      : 1 (local_rank: 1)\n  exitcode  : -15 (pid: 12)\n")
    res = _result([], returncodes=[1], agent_output=summary, nproc=3)
    got = T._outcomes(tmp_path, 3, 1, res)
    assert [(o.status, o.exit_code) for o in got] == [("ok", 0), ("stopped", -15), ("stopped", None)]
    plain = _result([], returncodes=[0], nproc=1)
    assert [(o.status, o.exit_code) for o in T._outcomes(tmp_path, 1, 1, plain)] == [("ok", 0)]


def test_rank_logs_ignore_what_is_not_a_rank_folder(tmp_path):
    base = tmp_path / "logs" / "node0" / "abc" / "attempt_0"
    (base / "1").mkdir(parents=True)
    (base / "error.json").write_text("{}")
    assert T._rank_logs(tmp_path, 2, 1, {}) == {1: base / "1"}
    assert T._read(tmp_path / "missing.log") == ""


def test_stack_dump_edge_cases():
    dump = ('Current thread 0x01 (most recent call first):\n\n  File "/w/faulty.py", line 31 in body\n'
            "\nThread 0x02:\n")
    assert T.parse_stack_dump(dump) == (None, None)  # the last thread's block has no frames
    one = 'Current thread 0x01:\n  (garbage)\n  File "/w/faulty.py", line 31 in body\nExtension modules: x\n'
    assert T.parse_stack_dump(one) == ("faulty.py:31 in body", None)


def test_track_and_dump_stacks_skip_unreadable_or_vanished_ranks(tmp_path, monkeypatch):
    (tmp_path / "rank0.where.json").write_text("{not json")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / "rank1.where.json").write_text(json.dumps({"pid": gone.pid}))
    (tmp_path / "rank2.where.json").write_text(json.dumps({"pid": os.getpid()}))
    tracked: dict = {}
    T._track([], tmp_path, tracked)
    assert os.getpid() in tracked and (gone.pid not in tracked or psutil.pid_exists(gone.pid))

    class Vanished:
        def is_running(self):
            raise psutil.NoSuchProcess(os.getpid())

    sent = []
    monkeypatch.setattr(T, "time", SimpleNamespace(sleep=sent.append))  # this module's clock only
    T._dump_stacks(tmp_path, {os.getpid(): Vanished()})  # rank 1 is not tracked, rank 2 is gone: no signal
    assert sent == [0.3]


def test_stop_kills_an_agent_that_ignores_sigterm():
    agent_proc = subprocess.Popen(["sh", "-c", "trap '' TERM; echo ready; sleep 30 & wait"], start_new_session=True,
                                  stdout=subprocess.PIPE, text=True)
    try:
        assert agent_proc.stdout is not None and agent_proc.stdout.readline().strip() == "ready"
        T._stop([agent_proc], {})  # SIGTERM to its group, a second's grace, then SIGKILL
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
        T._stop([], tracked)
        assert not tracked[rank.pid].is_running()  # killed, and reaped by _stop
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
    T._signal_group(done.pid, 0)  # its group is gone (signal 0 only asks whether it exists)


def test_ctrl_c_during_a_launch_stops_everything_and_is_raised_again(monkeypatch):
    sleeper = subprocess.Popen(["sleep", "30"])
    made = []

    class Agent:  # a forked agent the user interrupts while the launcher polls it
        def __init__(self, argv, env, log_path):
            self.pid, self.returncode, self.polls, self.log = sleeper.pid, None, 0, log_path
            made.append(self)

        def poll(self):
            self.polls += 1
            if self.polls == 1:
                raise KeyboardInterrupt
            self.returncode = -signal.SIGINT
            return self.returncode

        def wait(self, timeout=None):
            return self.returncode

    monkeypatch.delenv("PERFLAB_LAUNCH", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(agent, "can_fork_agents", lambda: True)
    monkeypatch.setattr(agent, "ForkedAgent", Agent)
    try:
        with pytest.raises(KeyboardInterrupt):
            T._launch("perflab.distributed.workers.faulty", 2, 1, [], 30.0, GLOO, None, False)
        assert len(made) == 1 and made[0].polls >= 2
        assert not made[0].log.parent.exists()  # the run folder is removed
        assert sleeper.poll() is None  # only the job's own processes are stopped
    finally:
        sleeper.kill()
        sleeper.wait()


# ----------------------------------------------------------------------------- the forked agent
def test_run_rank_passes_a_failing_exit_on(tmp_path, monkeypatch):
    script = tmp_path / "exits.py"
    script.write_text("import sys\nsys.exit(3)\n")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGINT)}
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        with pytest.raises(SystemExit) as e:
            agent.run_rank(str(script), False, ["--x"])
        assert e.value.code == 3
        assert sys.argv == [str(script), "--x"]
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)


def test_forked_agent_wait_times_out_while_it_runs():
    class Running:
        exitcode = None

        def join(self, timeout=None):
            pass

    a = agent.ForkedAgent.__new__(agent.ForkedAgent)
    a._proc, a.returncode, a.args = Running(), None, ["perflab.distributed.agent", "--nnodes", "1"]
    with pytest.raises(subprocess.TimeoutExpired, match="timed out after 0.5 seconds"):
        a.wait(0.5)
    with pytest.raises(subprocess.TimeoutExpired):
        a.wait()


def test_agent_entry_exits_with_torchruns_usage_error(tmp_path):
    """In a forked child, as launch runs it: a bad torchrun argument ends the agent with status 2."""
    log = tmp_path / "agent0.log"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's lines are measured in its own data file
        try:
            class NoReconfigure(io.StringIO):  # a replaced stream whose reconfigure refuses
                def reconfigure(self, **kw):
                    raise ValueError("not a TextIOWrapper")

            sys.stdout = NoReconfigure()
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False))
            agent._agent_entry(["--no-such-option", "x.py"], {"PATH": os.environ.get("PATH", "")}, str(log))
        finally:
            os._exit(99)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 2
    assert "perflab.distributed.agent: error: unrecognized arguments: --no-such-option" in log.read_text()

