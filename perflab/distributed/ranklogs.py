"""What the ranks of a torchrun job left in its run folder, read back as `RankOutcome`s.

Each rank writes `rank<r>.where.json`, `rank<r>.step.json`, `rank<r>.result.json`,
`rank<r>.error.json` and `rank<r>.done` there (`perflab.distributed.workers.runtime`), and torchrun
keeps its stdout and stderr under `logs/node<i>/<run>/attempt_0/<local_rank>/`; torchrun's failure
summary in the agent's own output gives the exit codes. `outcomes` puts them together, one
`RankOutcome` per rank; `parse_exception` and `parse_stack_dump` read a rank's stderr.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from perflab.distributed.outcome import LaunchResult, RankOutcome

TAIL_CHARS = 20_000


def read_tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-TAIL_CHARS:].decode("utf-8", errors="replace")


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


_SUMMARY = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning)\b.*)$")
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+) in (\S+)')


def rank_logs(run_dir: Path, nproc: int, nnodes: int, wheres: dict[int, dict]) -> dict[int, Path]:
    """Map each global rank to its log folder (attempt_0/<local_rank>)."""
    out: dict[int, Path] = {}
    for rank, w in wheres.items():
        if w and w.get("log_dir") and Path(w["log_dir"]).is_dir():
            out[rank] = Path(w["log_dir"])
    for node in range(nnodes):
        for d in sorted((run_dir / "logs" / f"node{node}").glob("*/attempt_*/*")):
            if not d.name.isdigit():
                continue
            rank = node * nproc + int(d.name)  # the usual assignment when a rank did not say where it was
            if rank not in out and d not in out.values():
                out[rank] = d
    return out


def parse_exception(stderr: str) -> str | None:
    """The last exception line of the last traceback in `stderr` ("ValueError: boom"), if any."""
    if "Traceback" not in stderr:
        return None
    block = stderr[stderr.rindex("Traceback"):]
    found = None
    for line in block.splitlines():
        m = _EXC_LINE.match(line.strip())
        if m:
            found = m.group(1)
    return found


def parse_stack_dump(stderr: str) -> tuple[str | None, str | None]:
    """From a faulthandler dump: ("faulty.py:34 in body, inside all_reduce()", "all_reduce").

    The first is the innermost frame outside torch (and the call it was in); the second is the
    torch.distributed function the rank was blocked in, or None if it was somewhere else.
    """
    idx = max(stderr.rfind("Current thread"), stderr.rfind("Thread 0x"))
    if idx < 0:
        return None, None
    frames = []
    for line in stderr[idx:].splitlines()[1:]:
        m = _FRAME.match(line)
        if not m:
            if frames:
                break
            continue
        frames.append((m.group(1), int(m.group(2)), m.group(3)))
    if not frames:
        return None, None

    def in_torch(f):
        return "/torch/" in f[0].replace("\\", "/")

    inner = frames[0]
    mine = next((f for f in frames if not in_torch(f) and not f[0].endswith("runtime.py")), inner)
    text = f"{Path(mine[0]).name}:{mine[1]} in {mine[2]}"
    waiting = None
    if mine is not inner:
        torch_frames = [f for f in frames[: frames.index(mine)] if in_torch(f)]
        outer = torch_frames[-1] if torch_frames else inner
        call = outer[2] if outer[2] != "wrapper" else inner[2]
        text += f", inside {call}()"
        if "/torch/distributed/" in inner[0].replace("\\", "/"):
            waiting = call
    return text, waiting


def outcomes(run_dir: Path, nproc: int, nnodes: int, res: LaunchResult) -> list[RankOutcome]:
    world = nproc * nnodes
    wheres = {r: read_json(run_dir / f"rank{r}.where.json") for r in range(world)}
    wheres = {r: w for r, w in wheres.items() if w}
    logs = rank_logs(run_dir, nproc, nnodes, wheres)
    exit_codes = {}
    for m in _SUMMARY.finditer(res.agent_output):
        exit_codes[int(m.group(1))] = int(m.group(3))
    all_zero = all(rc == 0 for rc in res.returncodes)
    out = []
    for rank in range(world):
        d = logs.get(rank)
        o = RankOutcome(rank=rank, status="unknown")
        if d is not None:
            o.stdout = read_tail(d / "stdout.log")
            o.stderr = read_tail(d / "stderr.log")
        w = wheres.get(rank) or {}
        o.started = bool(w) or bool(o.stdout.strip())
        o.pid, o.local_rank, o.node = w.get("pid"), w.get("local_rank"), w.get("node")
        if o.local_rank is None:
            o.local_rank, o.node = rank % nproc, rank // nproc
        step = read_json(run_dir / f"rank{rank}.step.json")
        o.step = step.get("step") if isinstance(step, dict) else None
        o.result = read_json(run_dir / f"rank{rank}.result.json")
        err = read_json(run_dir / f"rank{rank}.error.json")
        o.exit_code = exit_codes.get(rank)
        if (run_dir / f"rank{rank}.done").exists():
            o.status = "ok"
            o.exit_code = 0 if o.exit_code is None else o.exit_code
        elif isinstance(err, dict):
            o.status = "raised"
            o.error = f"{err.get('type')}: {err.get('message')}" if err.get("message") else str(err.get("type"))
            o.error_time = err.get("time")
        elif res.timed_out:
            o.status = "timeout"
        elif o.exit_code is not None:
            if o.exit_code == 0:
                o.status = "ok"
            elif o.exit_code < 0:
                o.status = "stopped"
            else:
                o.error = parse_exception(o.stderr)
                o.status = "raised" if o.error else "failed"
        elif all_zero:
            o.status, o.exit_code = "ok", 0  # a plain script: torchrun exits 0 only when every rank did
        else:
            o.error = parse_exception(o.stderr)
            o.status = "raised" if o.error else "stopped"
        if o.status in ("timeout", "stopped", "unknown"):
            o.where, o.waiting_in = parse_stack_dump(o.stderr)
        out.append(o)
    return out

