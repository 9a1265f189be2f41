"""The pytest plugin of the gpu_tests phase (`-p gpu_check.plugin`, with tools/ on PYTHONPATH).

Active only when GPU_CHECK_REPORTS names a file: one JSON line per finished test, and a watchdog that
ends the process when a test runs past GPU_CHECK_TEST_LIMIT seconds (its stacks to a file first),
so that a test stuck in CUDA or NCCL is reported and the check starts pytest again on the next one.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

_timer: list[threading.Timer] = []


def _report(rec: dict[str, Any]) -> None:
    path = os.environ.get("GPU_CHECK_REPORTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()


def _expire(nodeid: str, limit: float) -> None:
    import faulthandler

    _report({"nodeid": nodeid, "outcome": "timeout", "seconds": limit})
    # pytest holds fd 2 in a capture file that os._exit loses: the stacks go beside the reports
    with open(os.environ["GPU_CHECK_REPORTS"] + ".stacks", "a") as f:
        f.write(f"\n{nodeid} ran past {limit:.0f} s: pytest ended; the stacks at that moment:\n")
        f.flush()
        faulthandler.dump_traceback(file=f, all_threads=True)
    os._exit(86)


def pytest_runtest_logstart(nodeid, location) -> None:
    if not os.environ.get("GPU_CHECK_REPORTS"):
        return
    limit = float(os.environ.get("GPU_CHECK_TEST_LIMIT", "120"))
    _report({"started": nodeid})
    t = threading.Timer(limit, _expire, args=(nodeid, limit))
    t.daemon = True
    t.start()
    _timer[:] = [t]


def pytest_runtest_logfinish(nodeid, location) -> None:
    for t in _timer:
        t.cancel()
    _timer.clear()


_seen: dict[str, dict[str, Any]] = {}


def pytest_collection_finish(session) -> None:
    if os.environ.get("GPU_CHECK_REPORTS"):
        _report({"collected": [item.nodeid for item in session.items]})


def pytest_runtest_logreport(report) -> None:
    if not os.environ.get("GPU_CHECK_REPORTS"):
        return
    rec = _seen.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": "passed", "seconds": 0.0})
    rec["seconds"] = round(rec["seconds"] + float(getattr(report, "duration", 0.0)), 3)
    if report.outcome != "passed" and rec["outcome"] == "passed":
        rec["outcome"] = report.outcome
        lr = report.longrepr
        if isinstance(lr, tuple) and len(lr) == 3:  # a skip: (file, line, reason)
            rec["reason"] = str(lr[2]).removeprefix("Skipped: ")
        else:
            text = str(lr) if lr is not None else ""
            rec["reason"] = (f"{report.when}: " + text.strip().splitlines()[-1][:400]) if text.strip() else report.when
    if report.when == "teardown":
        _report(_seen.pop(report.nodeid))
