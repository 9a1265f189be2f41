"""Keep the profiler's own log lines off the learner's stderr, and nothing else.

torch's profiler (kineto) writes lines such as `USDT:... profiler_start` and `STAGE:... Completed
Stage: Warm Up` straight to file descriptor 2 from C++, where Python's `sys.stderr` cannot catch
them and no setting silences them (KINETO_LOG_LEVEL does not). `quiet_profiler()` points fd 2 at a
temporary file for the duration, then writes back every line that is not one of those.

    >>> with quiet_profiler():
    ...     with torch.profiler.profile(...) as prof: ...
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

NOISE = re.compile(r"^(USDT|STAGE):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ \S+\.cpp:\d+\] ")


def without_noise(text: str) -> str:
    """`text` minus the profiler's own log lines."""
    return "".join(line for line in text.splitlines(keepends=True) if not NOISE.match(line))


@contextlib.contextmanager
def quiet_profiler() -> Iterator[None]:
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        saved = os.dup(2)
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
