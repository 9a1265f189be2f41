"""The check's time and processes: the budget and each phase's share of it, the environment of every
child, children run in their own process groups and killed at their limits, one phase run and
recorded, the summary and the archive at the end. Standard library only."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpu_check.archive import MAX_PARTS, PART_BYTES, pack, split, strip_images
from gpu_check.records import key_figures, read_json, tail
from gpu_check.wheels import python_version

HERE = Path(__file__).resolve().parent  # tools/gpu_check: what `python3 tools/gpu_check` runs
ROOT = HERE.parents[1]
PHASES = ("install", "machine", "gpu_tests", "instruments", "reference", "notebooks")
# the phases' shares of the time: a phase may use its share of what is left, against the shares of
# the phases still to come (so time one leaves unused goes to the later ones), and at least
# FLOOR_S of it (a quick phase such as the machine's must not fail for a small budget)
SHARES = {"install": 0.06, "machine": 0.06, "gpu_tests": 0.20, "instruments": 0.22, "reference": 0.12, "notebooks": 0.34}
FLOOR_S = 60.0
RESERVE_S = 12.0  # kept for the archive and the summary at the end
MIN_START_S = 20.0  # no test or notebook is started with less than this left (5 % of a smaller budget)


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Check:
    """A run of the check without its phases (gpu_check.phases.GpuCheck adds them): its budget, its
    work folder, its children, the phases run and recorded one at a time, and the end."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.python = args.python or sys.executable
        self.t0 = time.monotonic()
        self.deadline = self.t0 + args.budget
        self.phase_end = self.deadline - RESERVE_S
        self.min_start = min(MIN_START_S, 0.05 * args.budget)
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(args.work).resolve() if args.work else Path(tempfile.mkdtemp(prefix="gpu-check-"))
        self.work.mkdir(parents=True, exist_ok=True)
        for sub in ("logs", "instruments", "reference", "notebooks", "machine", "site"):
            (self.work / sub).mkdir(exist_ok=True)
        self.site = self.work / "site"
        self.children: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.cuda: bool | None = None  # set by the machine phase, else asked when first needed
        self.version = python_version(self.python)
        self.summary: dict[str, Any] = {
            "check": "perflab GPU check (tools/gpu_check)", "started": _now_iso(), "budget_s": args.budget,
            "rehearsal": bool(args.rehearsal), "python": self.python, "checkout": str(ROOT),
            "argv": sys.argv[1:], "phases": {}, "figures": {}, "not_run": [],
        }

    # ---------------------------------------------------------------- time and processes
    def left(self) -> float:
        return self.phase_end - time.monotonic()

    def env(self, extra_path: tuple[str, ...] = ()) -> dict[str, str]:
        env = dict(os.environ)
        path = [str(self.site), str(ROOT), *extra_path]
        if env.get("PYTHONPATH"):
            path.append(env["PYTHONPATH"])
        jup = self.work / "jupyter"
        env.update({
            "PYTHONPATH": os.pathsep.join(path), "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
            "PERFLAB_RESULTS": str(self.work / "results"), "PYDEVD_DISABLE_FILE_VALIDATION": "1",
            "JUPYTER_RUNTIME_DIR": str(jup / "runtime"), "IPYTHONDIR": str(jup / "ipython"),
            "MPLCONFIGDIR": str(jup / "matplotlib"), "JUPYTER_PLATFORM_DIRS": "1",
        })
        return env

    def run(self, name: str, cmd: list[str], limit: float, *, env: dict[str, str] | None = None,
            stdout: Path | None = None, cwd: Path = ROOT) -> dict[str, Any]:
        """Run `cmd` in its own process group for at most `limit` seconds (and never past the phase's
        end); output to logs/<name>.log (stdout to `stdout` when given). Never raises."""
        limit = max(1.0, min(limit, self.left()))
        log = self.work / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        t = time.monotonic()
        out: dict[str, Any] = {"cmd": shlex.join(cmd), "limit_s": round(limit, 1), "log": str(log.relative_to(self.work))}
        with open(log, "wb") as err_f, (open(stdout, "wb") if stdout else open(os.devnull, "wb")) as out_f:
            err_f.write(f"$ {out['cmd']}\n".encode())
            err_f.flush()
            try:
                p = subprocess.Popen(cmd, stdout=out_f if stdout else err_f, stderr=err_f, stdin=subprocess.DEVNULL,
                                     cwd=str(cwd), env=env or self.env(), start_new_session=True)
            except OSError as e:
                return {**out, "rc": None, "timed_out": False, "seconds": 0.0, "error": f"{cmd[0]}: {e.strerror}"}
            with self.lock:
                self.children.add(p)
            try:
                rc = p.wait(timeout=limit)
                timed_out = False
            except subprocess.TimeoutExpired:
                self.kill(p)
                rc = p.wait()
                timed_out = True
            except BaseException:  # the check itself is being stopped: its child goes with it
                self.kill(p)
                raise
            finally:
                with self.lock:
                    self.children.discard(p)
        return {**out, "rc": rc, "timed_out": timed_out, "seconds": round(time.monotonic() - t, 2)}

    @staticmethod
    def kill(p: subprocess.Popen) -> None:
        for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            try:
                p.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def kill_all(self) -> None:
        with self.lock:
            live = list(self.children)
        for p in live:
            self.kill(p)

    def has_cuda(self) -> bool:
        """Whether the Python the check runs sees a CUDA GPU (the machine phase says; asked here otherwise)."""
        if self.cuda is None:
            f = self.work / "machine" / "cuda.json"
            self.run("cuda", self.py("-c", "import json, torch; print(json.dumps(torch.cuda.is_available()))"), 120,
                     stdout=f)
            try:
                self.cuda = bool(read_json(f))
            except (OSError, ValueError):
                self.cuda = False
        return self.cuda

    def py(self, *args: str) -> list[str]:
        return [self.python, *args]

    def failure(self, r: dict[str, Any], what: str) -> str:
        if r.get("error"):
            return r["error"]
        if r.get("timed_out"):
            return f"{what} ran past its {r['limit_s']:.0f} s limit and was ended (log: {r['log']})"
        last = [ln for ln in tail(self.work / r["log"]).splitlines() if ln.strip()]
        return f"{what} exited with {r.get('rc')}: {last[-1][:300] if last else 'no output'} (log: {r['log']})"

    # ---------------------------------------------------------------- phases
    def phase(self, name: str, fn: Callable[[], dict[str, Any]]) -> None:
        t = time.monotonic()
        if name not in self.args.phases:
            res: dict[str, Any] = {"status": "skipped", "reason": "not selected (--phases)"}
        elif self.deadline - RESERVE_S - t < 5:
            res = {"status": "skipped", "reason": "the budget was spent before this phase could start"}
        else:
            self.phase_end = self.deadline - RESERVE_S - phase_cut(name, self.deadline - RESERVE_S - t)
            print(f"[gpu-check] {name}: up to {self.left():.0f} s", flush=True)
            try:
                res = fn()
            except Exception as e:  # the check's own error is one phase's failure, never the run's
                import traceback

                (self.work / "logs" / f"{name}-check-error.log").write_text(traceback.format_exc())
                res = {"status": "failed", "reason": f"the check itself raised {type(e).__name__}: {e}"}
            finally:
                self.phase_end = self.deadline - RESERVE_S
                self.kill_all()
        res["seconds"] = round(time.monotonic() - t, 1)
        self.summary["phases"][name] = res
        # what the budget left out, named in one place (a phase whose others passed still says it passed)
        self.summary["not_run"] += [f"{name}: {i['name']}" for i in res.get("items", []) if i.get("status") == "not run"]
        print(f"[gpu-check] {name}: {res['status']} in {res['seconds']:.0f} s"
              + (f" ({res['reason'][:300]})" if res.get("reason") else ""), flush=True)
        self.write_summary()

    # ---------------------------------------------------------------- the end
    def write_summary(self) -> None:
        self.summary["seconds"] = round(time.monotonic() - self.t0, 1)
        self.summary["cuda_available"] = self.cuda  # null when no phase needed to know
        self.summary["figures"] = key_figures(self.summary["phases"])
        text = json.dumps(self.summary, indent=2, default=str)
        (self.work / "summary.json").write_text(text)
        (self.out / "summary.json").write_text(text)

    def finish(self) -> list[str]:
        self.kill_all()
        self.write_summary()
        for old in self.out.glob("gpu-check.tar.gz*"):
            old.unlink()
        archive = self.out / "gpu-check.tar.gz"
        pack(self.work, archive)
        if archive.stat().st_size > MAX_PARTS * PART_BYTES:  # the executed notebooks' pictures go first
            for nb in (self.work / "notebooks").glob("*.ipynb"):
                strip_images(nb)
            pack(self.work, archive)
        names = split(archive, PART_BYTES, MAX_PARTS)
        self.summary["archive"] = names
        self.write_summary()
        if not self.args.work:
            shutil.rmtree(self.work, ignore_errors=True)
        return names


def phase_cut(name: str, remaining: float) -> float:
    """Seconds of `remaining` kept back from phase `name` for the phases after it."""
    later = PHASES[PHASES.index(name):]
    if len(later) == 1:
        return 0.0
    cap = remaining * SHARES[name] / sum(SHARES[p] for p in later)
    return max(0.0, remaining - max(cap, min(FLOOR_S, remaining)))
