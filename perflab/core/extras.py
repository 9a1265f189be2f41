"""What needs an extra says which one, in one line.

perflab's own dependencies are what `import perflab` and the `perflab` command need. The notebooks'
stack, the trace cross-check and the rest are extras (pyproject.toml); code that needs one imports
it through `need`, so a learner without it reads what to install instead of a traceback:

    papermill = need("papermill", "course", "perflab grade runs notebooks with papermill")
"""

from __future__ import annotations

import importlib
from types import ModuleType

from perflab.core.errors import PerflabError


class MissingExtra(PerflabError, ImportError):
    """A package of one of perflab's extras is not installed; the message says which extra."""


def need(module: str, extra: str, what: str) -> ModuleType:
    """Import `module`, or raise MissingExtra: "<what>: <module> is not installed; pip install 'perflab[<extra>]'"."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing = (getattr(e, "name", None) or module).split(".")[0]
        raise MissingExtra(f"{what}: {missing} is not installed; pip install 'perflab[{extra}]'") from None
