"""Run `perflab ...` for a test: in this process by default, or as `python -m perflab` (fresh=True).

In this process the command goes through the same `perflab.cli.main` (its parser, its one-line
errors, its exit status) without a new interpreter importing torch again, which costs 2-4 s a
call on a 2-core machine: the suite makes about a hundred such calls. A test that needs the real
entry point, a clean process (environment read at import, changed CPU affinity, a timeout) or
that the command must not leave state behind passes `fresh=True`. The result has the fields of
`subprocess.CompletedProcess` either way, so a test reads `returncode`, `stdout`, `stderr`.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys


def perflab(*args: str, timeout: float = 300, env: dict | None = None, cwd=None,
            fresh: bool = False) -> subprocess.CompletedProcess:
    argv = [str(a) for a in args]
    if fresh:
        return subprocess.run([sys.executable, "-m", "perflab", *argv], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd)
    from perflab.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    try:
        os.environ.update({k: str(v) for k, v in (env or {}).items()})
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:  # argparse's usage errors
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["perflab", *argv], code, out.getvalue(), err.getvalue())
