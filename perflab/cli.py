"""The `perflab` command line.

Each sub-command lives in a module of `perflab.commands` that defines `register(subparsers)`;
they are discovered at start-up, so a new topic adds a file there and nothing here.

Errors a user can fix (bad sizes, an unknown dtype, a dtype the device lacks, a shape too large
for memory) print one line that says what to change and exit with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import pkgutil
import sys
from typing import Any

from perflab.core.errors import PerflabError, one_line


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (no usage dump) and exits 2."""

    def error(self, message: str):  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see '{self.prog} --help')\n")
        sys.exit(2)


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


def build_parser() -> argparse.ArgumentParser:
    from perflab import __version__, commands

    parser = OneLineParser(prog="perflab", description="Measure what your hardware really does for training.")
    parser.add_argument("--version", action="version", version=f"perflab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for mod in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if mod.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{mod.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except PerflabError as e:
        sys.stderr.write(f"perflab {args.command}: error: {one_line(e)}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"perflab {args.command}: interrupted\n")
        return 130
    except BrokenPipeError:  # `perflab ... | head`: the reader has what it wanted
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        except (OSError, ValueError):
            pass
        return 0
    except Exception as e:  # out of memory is the user's to fix too; other bugs keep their traceback
        from perflab.core.results import classify_failure

        if classify_failure(e) == "oom":
            sys.stderr.write(f"perflab {args.command}: error: out of memory ({one_line(e)}): choose smaller sizes\n")
            return 3
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
