"""Sub-commands of `perflab`: each module defines `register(subparsers)` (see perflab/cli.py)."""
