"""What a torchrun job did: how each rank ended, the job's one-line story and its report.

`perflab.distributed.torchrun.launch` returns a `LaunchResult`; its `ranks` are `RankOutcome`s read
from the run's folder by `perflab.distributed.ranklogs`. `message` says in one line what happened
("rank 2 raised ValueError: ...", "rank 1 did not finish within 30 s (last step 'compute', at
faulty.py:41 in body)"), `report()` adds each failed rank's output, `as_dict()` is the JSON a
command prints.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflab.core.errors import PerflabError
from perflab.core.jsonable import JSON


class DistRunError(PerflabError):
    """A torchrun job did not finish on every rank; the message says which rank and why."""

    def __init__(self, message: str, result: LaunchResult | None = None):
        super().__init__(message)
        self.result = result



@dataclass(frozen=True)
class BackendChoice:
    """Which torch.distributed backend a job uses, on which device, and why."""

    name: str  # 'gloo' or 'nccl'
    device: str  # 'cpu' or 'cuda'
    reason: str



@dataclass
class RankOutcome:
    """How one rank ended."""

    rank: int
    status: str  # ok | raised | timeout | stopped | failed | unknown
    exit_code: int | None = None
    error: str | None = None  # "ValueError: boom"
    step: str | None = None  # the last step it announced (runtime.RankContext.step)
    where: str | None = None  # from its stack dump when it hung: "faulty.py:41 in body"
    waiting_in: str | None = None  # the torch.distributed call it was blocked in when it hung, if any
    started: bool = False  # its worker code ran (it said where it was, or printed something)
    stdout: str = ""
    stderr: str = ""
    pid: int | None = None
    local_rank: int | None = None
    node: int | None = None
    result: Any = None
    error_time: float | None = None

    @property
    def output(self) -> str:
        return (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).strip()

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.output.splitlines()[-lines:])

    def as_dict(self) -> JSON:
        return {"rank": self.rank, "status": self.status, "exit_code": self.exit_code, "error": self.error,
                "step": self.step, "where": self.where, "pid": self.pid, "local_rank": self.local_rank,
                "node": self.node, "output_tail": self.tail()}


@dataclass
class LaunchResult:
    """What a torchrun job did: every rank's outcome, the command, the time it took."""

    target: str
    nproc: int
    nnodes: int
    backend: BackendChoice
    commands: list[list[str]]
    seconds: float
    timeout_s: float
    timed_out: bool
    returncodes: list[int | None]
    ranks: list[RankOutcome] = field(default_factory=list)
    agent_output: str = ""
    pids: list[int] = field(default_factory=list)  # every process the job started (agents and ranks)
    run_dir: Path | None = None

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def ok(self) -> bool:
        return (not self.timed_out and all(rc == 0 for rc in self.returncodes)
                and len(self.ranks) == self.world_size and all(r.status == "ok" for r in self.ranks))

    @property
    def results(self) -> list[Any]:
        """Each rank's reported result (None where a rank reported nothing), indexed by rank."""
        return [r.result for r in self.ranks]

    @property
    def command(self) -> str:
        """The (first) torchrun command, as one shell line."""
        return shlex.join(self.commands[0]) if self.commands else ""

    @property
    def message(self) -> str:
        """One line: what happened."""
        n = self.world_size
        if self.ok:
            return f"{n} ranks ({self.backend.name}) finished in {self.seconds:.1f} s"
        if self.timed_out:
            stuck = [r for r in self.ranks if r.status == "timeout"]
            waiting = [r for r in stuck if r.waiting_in]
            culprits = [r for r in stuck if not r.waiting_in] or stuck
            parts = []
            for r in culprits:
                bits = [f"last step {r.step!r}"] if r.step else []
                if not r.started:
                    bits.append("it had not started yet: torchrun and `import torch` were still loading")
                if r.where:
                    bits.append(f"at {r.where}")
                parts.append(f"rank {r.rank}" + (f" ({', '.join(bits)})" if bits else ""))
            msg = f"{'; '.join(parts) or 'no rank'} did not finish within {self.timeout_s:g} s"
            others = [r for r in waiting if r not in culprits]
            if others:
                calls = sorted({r.waiting_in for r in others if r.waiting_in})
                msg += f"; {_who([r.rank for r in others])} waiting for it in {', '.join(calls)}()"
            done = [r.rank for r in self.ranks if r.status == "ok"]
            if done:
                msg += f"; {_who(done, 'had', 'had')} finished"
            return msg + "; every process was stopped"
        failed = sorted([r for r in self.ranks if r.status in ("raised", "failed")],
                        key=lambda r: (r.error_time is None, r.error_time or 0.0, r.rank))
        if failed:
            first = failed[0]
            what = f"raised {_short(first.error)}" if first.status == "raised" and first.error else \
                f"exited with code {first.exit_code}"
            msg = f"rank {first.rank} {what}"
            later = failed[1:]
            if later:
                steps = sorted({r.step for r in later if r.step})
                msg += (f"; then {_who([r.rank for r in later], 'failed', 'failed')} too"
                        + (f" (in {', '.join(repr(s) for s in steps)}, waiting for it)" if steps else ""))
            stopped = [r.rank for r in self.ranks if r.status in ("stopped", "unknown")]
            if stopped:
                msg += f"; {_who(stopped)} stopped"
            return msg
        if len(self.ranks) < n:
            return f"only {len(self.ranks)} of {n} ranks started (torchrun exit codes {self.returncodes})"
        bad = [r for r in self.ranks if r.status != "ok"]
        if bad:
            return f"{_who([r.rank for r in bad], 'did', 'did')} not finish ({bad[0].status})"
        return f"torchrun exited with {self.returncodes} although every rank finished"

    def report(self, lines: int = 15) -> str:
        """The one-line message, then each rank that did not finish with the tail of its output."""
        out = [self.message]
        for r in self._failed_first():
            if r.status == "ok":
                continue
            out.append(f"--- rank {r.rank}: {r.status}" + (f" ({_short(r.error, 120)})" if r.error else "")
                       + (f", last step {r.step!r}" if r.step else "") + " ---")
            out.append(r.tail(lines) or "(no output)")
        if not self.ok and not self.ranks and self.agent_output:
            out.append("--- torchrun ---")
            out.append("\n".join(self.agent_output.strip().splitlines()[-lines:]))
        return "\n".join(out)

    def _failed_first(self) -> list[RankOutcome]:
        """Ranks in the order that explains the failure: the first to raise, or the stuck ones, first."""
        def key(r: RankOutcome):
            if r.status in ("raised", "failed"):
                return (0, r.error_time is None, r.error_time or 0.0, r.rank)
            if r.status == "timeout":
                return (0 if not r.waiting_in else 1, False, 0.0, r.rank)
            return (2, False, 0.0, r.rank)
        return sorted(self.ranks, key=key)

    def raise_for_status(self) -> LaunchResult:
        if not self.ok:
            raise DistRunError(self.message, self)
        return self

    def as_dict(self) -> JSON:
        return {"target": self.target, "nproc": self.nproc, "nnodes": self.nnodes, "world_size": self.world_size,
                "backend": self.backend.name, "device": self.backend.device, "backend_reason": self.backend.reason,
                "ok": self.ok, "message": self.message, "seconds": round(self.seconds, 3),
                "timeout_s": self.timeout_s, "timed_out": self.timed_out, "returncodes": self.returncodes,
                "command": self.command, "ranks": [r.as_dict() for r in self.ranks]}

    def _repr_pretty_(self, p, cycle):  # pragma: no cover - display only
        p.text(self.report())


def _ranks(xs: list[int]) -> str:
    return ", ".join(str(x) for x in xs)


def _who(xs: list[int], singular: str = "was", plural: str = "were") -> str:
    """'rank 1 was' / 'ranks 0, 2 were'."""
    return f"rank {xs[0]} {singular}" if len(xs) == 1 else f"ranks {_ranks(xs)} {plural}"


def _short(text: str | None, limit: int = 160) -> str:
    text = text or ""
    return text if len(text) <= limit else text[: limit - 1] + "…"

