"""Checks on sizes typed at the CLI or dragged on a slider, with messages that say what to change.

Every check raises `InputError` with one line; nothing here imports torch at module import.
"""

from __future__ import annotations

import math
import numbers

from perflab.core.errors import InputError

GiB = 2**30


def positive_int(name: str, value, *, maximum: int | None = None, multiple_of: int | None = None) -> int:
    """`value` as an int ≥ 1 (and ≤ maximum, and a multiple of `multiple_of` when given)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        elif isinstance(value, str) and value.strip().lstrip("+").isdigit():
            value = int(value)
        else:
            raise InputError(f"{name} must be a whole number ≥ 1 (got {value!r})")
    value = int(value)
    if value < 1:
        raise InputError(f"{name} must be ≥ 1 (got {value}): choose a positive size")
    if maximum is not None and value > maximum:
        raise InputError(f"{name}={value} is larger than the limit {maximum}: choose a smaller {name}")
    if multiple_of and value % multiple_of:
        lo = value - value % multiple_of
        hi = lo + multiple_of
        near = f"{lo} or {hi}" if lo else f"{hi}"
        raise InputError(f"{name}={value} must be a multiple of {multiple_of}: try {near}")
    return value


def positive_number(name: str, value) -> float:
    """`value` as a finite float > 0, or an InputError naming `name`."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a positive number (got {value!r})") from None
    if not v > 0 or math.isinf(v):
        raise InputError(f"{name} must be a positive number (got {value!r})")
    return v


def fits_in_memory(what: str, nbytes: int, free_bytes: int | None, *, fraction: float = 0.8) -> None:
    """Raise when `nbytes` exceeds `fraction` of the device's free memory."""
    if free_bytes is None:
        return
    budget = int(free_bytes * fraction)
    if nbytes > budget:
        raise InputError(
            f"{what} needs {nbytes / GiB:.2f} GiB but only {budget / GiB:.2f} GiB "
            f"({fraction:.0%} of the {free_bytes / GiB:.2f} GiB free) can be used: choose smaller sizes"
        )


def matmul_bytes(m: int, n: int, k: int, itemsize: int, out_itemsize: int | None = None) -> int:
    """Bytes of A (m×k), B (k×n) and C (m×n) for one matmul."""
    return (m * k + k * n) * itemsize + m * n * (out_itemsize or itemsize)
