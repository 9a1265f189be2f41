"""The `perflab` command line.

Each sub-command lives in a module of `perflab.commands` that defines `register(subparsers)`;
they are discovered at start-up, so a new topic adds a file there and nothing here.

Errors a user can fix (bad sizes, an unknown dtype, a dtype the device lacks, a shape too large
for memory) print one line that says what to change and exit with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

# The shared argument helpers live below the commands (perflab/commands/_args.py); their names stay
# importable from here for code outside the package.
from perflab.commands._args import OneLineParser, dtype, emit, positive_float, positive_int  # noqa: F401
from perflab.core.errors import PerflabError, one_line


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
