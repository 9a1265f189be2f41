"""Exceptions that carry a message meant for a person.

`InputError` is raised for anything a user typed or dragged that cannot work (a zero or
negative size, an unknown dtype, a shape too large for the device). Its message is one line
that says what to change; the CLI prints it without a traceback and widgets show it in place
of a plot.
"""


class PerflabError(Exception):
    """Base class for errors whose message is written for the user."""


class InputError(PerflabError, ValueError):
    """A parameter that cannot work; the message says what to change."""


class UnsupportedError(PerflabError):
    """The current device cannot do this (a dtype it lacks, a GPU-only feature on a CPU)."""


class CorrectnessError(PerflabError, AssertionError):
    """A kernel's answer differs from its reference by more than the tolerance."""


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message, prefixed with its type when it is not ours."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
    if isinstance(exc, PerflabError):
        return text
    return f"{exc.__class__.__name__}: {text}"
