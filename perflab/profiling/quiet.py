"""Keep the profiler's own log lines off the learner's stderr, and nothing else: lesson 09's name for
`perflab.core.stderr.quiet_stderr`, the one stderr silencer (read there which lines it hides; every
other line, a real warning or a C++ error, is written back to stderr).

    >>> with quiet_profiler():
    ...     with torch.profiler.profile(...) as prof: ...
"""

from __future__ import annotations

from perflab.core.stderr import NOISE, without_noise
from perflab.core.stderr import quiet_stderr as quiet_profiler

__all__ = ["NOISE", "quiet_profiler", "without_noise"]
