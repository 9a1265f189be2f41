"""What every sub-command shares: argparse types that refuse bad input in one line, and `emit`.

It lives in the commands' own package, below `perflab.cli` (which discovers and imports the
commands), so that imports go one way: cli -> commands -> _args.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (no usage dump) and exits 2."""

    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see '{self.prog} --help')\n")
        sys.exit(2)


def device_dtype(chosen, device):
    """The dtype a measuring command runs in, and why: `chosen` (a parsed --dtype, checked against
    the device; the reason is then None), or the fastest dtype this device multiplies natively
    (`perflab.core.dtypes.fast_dtype`) with its reason in words, for the command to print."""
    from perflab.core.dtypes import check_supported, fast_dtype

    if chosen is not None:
        return check_supported(chosen, device), None
    return fast_dtype(device)


def positive_int(text: str) -> int:
    """argparse type: a whole number ≥ 1 (accepts 4096, 4_096 and 4k-style 1e3 only when whole)."""
    try:
        value = float(text.replace("_", "")) if any(c in text for c in ".eE") else int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1, got {text!r}") from None
    if isinstance(value, float):
        if not value.is_integer():
            raise argparse.ArgumentTypeError(f"expected a whole number ≥ 1, got {text!r}")
        value = int(value)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1 (got {value}): choose a positive size")
    return value


def whole_number(text: str, what: str = "") -> int:
    """argparse type: a whole number ≥ 0 (`what` names it in the message: "of workers")."""
    of = f" {what}" if what else ""
    try:
        v = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number{of} ≥ 0, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{what.removeprefix('of ') or 'it'} must be ≥ 0 (got {v})" if what
                                         else f"must be ≥ 0 (got {v})")
    return v


def nonneg_float(text: str, unit: str = "") -> float:
    """argparse type: a finite number ≥ 0 (`unit` names it in the message: "ms")."""
    try:
        v = float(text)
    except ValueError:
        of = f" of {'milliseconds' if unit == 'ms' else unit}" if unit else ""
        raise argparse.ArgumentTypeError(f"expected a number{of} ≥ 0, got {text!r}") from None
    if not v >= 0 or math.isinf(v):
        raise argparse.ArgumentTypeError(f"must be ≥ 0 {unit} (got {text})" if unit else f"must be a number ≥ 0 (got {text})")
    return v


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a positive number (got {text})")
    return value


def dtype(text: str):
    """argparse type: a dtype by any name people use ('bf16', 'bfloat16', 'torch.bfloat16'),
    parsed here once into a `perflab.core.dtypes.DType` that the layers below take as it is."""
    from perflab.core.dtypes import parse_dtype
    from perflab.core.errors import InputError

    try:
        return parse_dtype(text)
    except InputError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def emit(obj: Any, as_json: bool, text: str | None = None) -> None:
    """Print `obj` as JSON (NaN/inf as null) or `text` for people."""
    if as_json:
        print(json.dumps(_clean(obj), indent=2))
    else:
        print(text if text is not None else obj)


def _clean(x):
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x
