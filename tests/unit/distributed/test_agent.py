"""Tests of `perflab.distributed.agent`."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys

import pytest

from perflab.distributed import agent
from perflab.distributed import torchrun as T

from .helpers import GLOO


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


def test_agents_fork_only_where_the_main_module_is_safe_to_import_again(monkeypatch):
    import types

    from perflab.distributed import agent

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("PERFLAB_LAUNCH", raising=False)
    as_module = types.ModuleType("__main__")
    as_module.__spec__ = types.SimpleNamespace(name="pytest")  # python -m pytest, python -m perflab
    as_module.__file__ = "/x/pytest/__main__.py"
    plain_script = types.ModuleType("__main__")
    plain_script.__spec__, plain_script.__file__ = None, "/home/me/train.py"  # python train.py
    interactive = types.ModuleType("__main__")  # a REPL or a notebook kernel: no file to run again
    for main, want in ((as_module, True), (plain_script, False), (interactive, True)):
        monkeypatch.setitem(sys.modules, "__main__", main)
        assert agent.can_fork_agents() is want, main
    monkeypatch.setenv("PERFLAB_LAUNCH", "torchrun")
    assert agent.can_fork_agents() is False
