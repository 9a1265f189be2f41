"""Keep torch's known C++ noise off a learner's stderr, and nothing else.

Some of torch's C++ writes lines straight to file descriptor 2, where Python's `sys.stderr` cannot
catch them and no setting silences them (KINETO_LOG_LEVEL does not):

* the profiler (kineto) logs its own start and stop, `USDT:... profiler_start` / `profiler_stop`, and
  on some builds its stages, `STAGE:... Completed Stage: Warm Up`;
* with `profile_memory=True` the CPU allocator notes every block freed while profiling that was
  allocated before it started: `[W... CPUAllocator.cpp:245] Memory block of unknown size was
  allocated before the profiling started, profiler results will not include the deallocation event`.

`quiet_stderr()` points fd 2 at a temporary file for the duration, then writes back to `sys.stderr`
every line that is not one of those (`NOISE`): a real warning or a C++ error printed meanwhile still
reaches the learner, only later. (Were the process to die inside, what it printed there would be
lost with it.) It nests: an inner block's kept lines pass through the outer one's filter.

    >>> with quiet_stderr():
    ...     with torch.profiler.profile(...) as prof: ...
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

# each pattern matches one known line from its start; nothing else is dropped
NOISE = (
    # kineto's own log lines: 'USDT:2026-11-23 20:17:11 12996:12996 SyncActivityProfilerHandler.cpp:52] profiler_start'
    re.compile(r"^(USDT|STAGE):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \S+\.cpp:\d+\] "),
    # the CPU allocator's note under profile_memory (c10's warning prefix: '[W1127 15:48:51.976255077 CPUAllocator.cpp:245] ')
    re.compile(r"^\[W[^\]]*\bCPUAllocator\.cpp:\d+\] (Warning: )?Memory block of unknown size was allocated before "
               r"the profiling started"),
)


def is_noise(line: str) -> bool:
    """Whether `line` is one of the known C++ lines (`NOISE`)."""
    return any(p.match(line) for p in NOISE)


def without_noise(text: str) -> str:
    """`text` minus the known C++ lines, every other line kept as it was."""
    return "".join(line for line in text.splitlines(keepends=True) if not is_noise(line))


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Inside: fd 2 goes to a temporary file. After: every line written there that is not known noise
    goes to `sys.stderr` (module docstring)."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # pragma: no cover - no fd 2 to redirect (a daemon): nothing to hide
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            rest = without_noise(tmp.read().decode(errors="replace"))
            if rest:
                sys.stderr.write(rest)
                with contextlib.suppress(Exception):
                    sys.stderr.flush()
