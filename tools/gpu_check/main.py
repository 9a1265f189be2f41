"""The command line (`python3 tools/gpu_check --out DIR [--budget 420]`, README, "GPU") and the run:
every phase in turn within the budget, stopped cleanly by SIGTERM, then the summary and the archive.
Standard library only (the probes import torch in their own processes)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path

import gpu_check
from gpu_check.phases import GpuCheck
from gpu_check.probes import PROBES, probe
from gpu_check.runner import PHASES, RESERVE_S, ROOT


class Stopped(BaseException):
    """SIGTERM: not an Exception, so that no phase records it as its own failure and goes on."""


def _stop(signum, frame) -> None:
    raise Stopped(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=gpu_check.__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="the folder for summary.json and the archive")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for the whole check (default 420)")
    ap.add_argument("--wheels", default=str(ROOT / ".whl"), help="the wheels to install (default ./.whl, make gpu-wheels)")
    ap.add_argument("--python", help="the Python to run everything with (default: this one)")
    ap.add_argument("--phases", default=",".join(PHASES), help=f"which phases, comma-separated (default all: {','.join(PHASES)})")
    ap.add_argument("--notebooks", nargs="+", metavar="GLOB",
                    help="only these notebooks (globs on paths such as notebooks/03_* or labs/solutions/*)")
    ap.add_argument("--test-limit", type=float, default=120.0, help="seconds per gpu test (default 120)")
    ap.add_argument("--probe-limit", type=float, default=150.0, help="seconds per instrument probe (default 150)")
    ap.add_argument("--reference-limit", type=float, default=150.0, help="seconds per reference kind (default 150)")
    ap.add_argument("--notebook-limit", type=float, default=240.0, help="seconds per notebook (default 240)")
    ap.add_argument("--rehearsal", action="store_true",
                    help="the plumbing at small sizes: one lesson and one lab solution in smoke mode, probes in one process")
    ap.add_argument("--work", help="keep the work folder here (default: a temporary folder, removed at the end)")
    ap.add_argument("--probe", choices=(*PROBES, "all"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe:
        if not args.work:
            print("gpu_check: --probe needs --work", file=sys.stderr)
            return 2
        return probe(args.probe, Path(args.work), args.rehearsal)
    if not args.out:
        print("gpu_check: give --out DIR (where summary.json and the archive go)", file=sys.stderr)
        return 2
    if args.budget < 4 * RESERVE_S:
        print(f"gpu_check: --budget {args.budget:g} is too small: give at least {4 * RESERVE_S:g} seconds", file=sys.stderr)
        return 2
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        print(f"gpu_check: unknown phase {unknown[0]!r}: use some of {', '.join(PHASES)}", file=sys.stderr)
        return 2
    args.phases = phases
    check = GpuCheck(args)
    # the hard end: whatever still runs at the budget's end is killed (the phases end theirs sooner)
    guard = threading.Timer(max(1.0, check.deadline - time.monotonic() - RESERVE_S / 2), check.kill_all)
    guard.daemon = True
    guard.start()
    signal.signal(signal.SIGTERM, _stop)  # stopped from outside: children killed, summary and archive written
    try:
        for name in PHASES:
            check.phase(name, getattr(check, name))
    except (Stopped, KeyboardInterrupt) as e:
        check.kill_all()
        why = f"stopped from outside ({e or 'SIGINT'})"
        check.summary["stopped"] = why
        for name in PHASES:
            if name not in check.summary["phases"]:
                check.summary["phases"][name] = {"status": "skipped", "reason": why, "seconds": 0.0}
    finally:
        guard.cancel()
    names = check.finish()
    s = check.summary
    print(f"[gpu-check] {s['seconds']:.0f} s of {args.budget:.0f}; summary: {check.out / 'summary.json'}; "
          f"archive: {', '.join(names)}")
    for name, ph in s["phases"].items():
        print(f"  {name:<12} {ph['status']:<8} {ph['seconds']:>6.0f} s  {ph.get('reason', '')[:160]}")
    if s["not_run"]:
        print("  not run: " + ", ".join(s["not_run"]))
    return 1 if any(ph["status"] == "failed" for ph in s["phases"].values()) else 0
