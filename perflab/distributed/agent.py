"""torchrun with forked ranks: `python -m perflab.distributed.agent <torchrun's own arguments>`.

It parses exactly torchrun's command line (torch.distributed.run's parser and config) and runs the
same elastic agent, rendezvous, log redirection and failure summary; the one difference is how a
rank starts. torchrun execs a new interpreter per rank, which imports torch again (2-3 s each on a
small machine, all ranks at once); here the agent imports torch once and forks the ranks, which
then run the module or script as `__main__` (runpy), as `python -m` would. A 2-rank job that does
nothing starts in about 2.5 s instead of 6 s on 2 cores.

Forking is safe because the agent never touches a thread pool before it forks, and it is used for
CPU ranks only: torchrun's own `LaunchConfig` asks `torch.cuda.is_available()`, after which a forked
child cannot use CUDA, so `launch` execs GPU ranks with plain torchrun (`torchrun.launch_agent`). The
agents themselves can start warm too (`ForkedAgent`): forked from a server process that imported
torch once (multiprocessing's forkserver), where the calling program's `__main__` is safe for
multiprocessing to import again (`can_fork_agents`); otherwise they are plain processes. `launch`
uses it on Linux; PERFLAB_LAUNCH=torchrun (or macOS, where fork is unsafe) goes back to plain
torchrun. A rank that raises prints its traceback to its stderr, like a `python -m` rank would.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import traceback

FORKED_ENV = "PERFLAB_RANK_FORKED"  # perflab.distributed.workers.runtime reads it: return, do not os._exit


def run_rank(target: str, is_module: bool, argv: list[str]) -> None:
    """One rank's body, in the forked child: the module or script as `__main__`."""
    # The agent's handlers (SIGTERM etc. raise inside it) are not a rank's: give back what a fresh
    # interpreter has, so that a stopped rank dies as an exec'd one would.
    for name in ("SIGTERM", "SIGHUP", "SIGQUIT"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = [target, *argv]
    try:
        if is_module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, str(__import__("pathlib").Path(target).resolve().parent))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        raise
    finally:
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    from torch.distributed.elastic.multiprocessing.errors import record
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, get_args_parser

    os.environ[FORKED_ENV] = "1"
    args = get_args_parser().parse_args(argv)
    if args.module and args.training_script.startswith("perflab."):
        # perflab's workers only define things at import (their main runs under __main__): import
        # one here and what it imports is imported once for every rank of this node.
        import importlib

        importlib.import_module(args.training_script)

    @record
    def _run(args) -> None:
        config, _cmd, _cmd_args = config_from_args(args)
        config.start_method = "fork"
        elastic_launch(config, run_rank)(args.training_script, bool(args.module),
                                         [str(a) for a in args.training_script_args])

    _run(args)


if __name__ == "__main__":
    main()


# ----------------------------------------------------------------------------- a warm start for agents
_SERVER = None
PRELOAD = ["torch", "torch.distributed.run", "torch.distributed.launcher.api", "perflab.distributed.agent"]


def can_fork_agents() -> bool:
    """Whether `ForkedAgent` may be used from this process: Linux, and a `__main__` that
    multiprocessing will not run again in the child (a module run with -m, an interactive session
    or a notebook kernel; a plain script might not guard its top level with `if __name__ ...`)."""
    if not sys.platform.startswith("linux") or os.environ.get("PERFLAB_LAUNCH", "").lower() in {"torchrun", "exec"}:
        return False
    main = sys.modules.get("__main__")
    return getattr(getattr(main, "__spec__", None), "name", None) is not None or not hasattr(main, "__file__")


def _server():
    global _SERVER
    if _SERVER is None:
        import multiprocessing as mp

        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)  # imported once, in the server; every agent forks from it
        _SERVER = ctx
    return _SERVER


def _agent_entry(argv: list[str], env: dict[str, str], log_path: str) -> None:
    """In the forked agent: a session of its own, output to its log, the launch's environment."""
    os.setsid()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # a TextIOWrapper's; a replaced stream may lack it
        try:
            if reconfigure is not None:
                reconfigure(line_buffering=True)
        except ValueError:
            pass
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["perflab.distributed.agent", *argv]
    code = 0
    try:
        main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # the ChildFailedError summary is already printed by torchrun's @record
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class ForkedAgent:
    """An agent (`main(argv)`) forked from a server that has already imported torch: what
    `subprocess.Popen([python, "-m", "perflab.distributed.agent", *argv])` does, less the 2-3 s a new
    interpreter spends importing torch. The same attributes `launch` uses: pid, poll, wait, returncode."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path) -> None:
        self._proc = _server().Process(target=_agent_entry, args=(list(argv), dict(env), str(log_path)))
        self._proc.start()
        if self._proc.pid is None:  # pragma: no cover - start() returns only once the child exists
            raise RuntimeError("the agent process did not start")
        self.pid: int = self._proc.pid
        self.returncode: int | None = None
        self.args = ["perflab.distributed.agent", *argv]

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._proc.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        self._proc.join(timeout)
        rc = self.poll()
        if rc is None:  # only after a timeout: join(None) returns once the child has exited
            raise subprocess.TimeoutExpired(self.args, timeout if timeout is not None else 0.0)
        return rc
