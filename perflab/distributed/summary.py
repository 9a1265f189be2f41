"""Lesson 06's closing table: what the learner measured, one quantity per row, with its unit.

    >>> what_you_measured(rep, sweep, practice).table()

It reads the section's typed results (`collectives.CollectivesRun`, `busbw.BusbwRun`, `ddp.Practice`);
a part that measured nothing says so in its row instead of a number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perflab.core.readout import num, seconds


@dataclass(frozen=True)
class Row:
    quantity: str
    value: str  # formatted, with its unit, or why there is none


@dataclass(frozen=True)
class Summary:
    rows: tuple[Row, ...]

    def table(self):
        import pandas as pd

        return pd.DataFrame([{"quantity": r.quantity, "value": r.value} for r in self.rows]).set_index("quantity")


def what_you_measured(rep: Any, sweep: Any, practice: Any) -> Summary:
    """The lesson's figures: primitives verified, the ring's bytes against the formula, the longest wait at the
    barrier, the best busbw, no_sync's and PowerSGD's bytes."""
    from perflab.distributed.busbw import size_label
    from perflab.distributed.collectives import PRIMITIVES

    n, backend = rep.launch.world_size, rep.launch.backend.name
    s = rep.summary
    rows = [Row(f"primitives verified on {n} ranks ({backend})", f"{int(s['ok'].sum()) if len(s) else 0} of {len(PRIMITIVES)}")]
    ring = rep.ring_rows()
    rows.append(Row("ring all-reduce: bytes sent per rank ÷ 2(N−1)K/N·4",
                    num(max(c.bytes_sent for _, c in ring) / max(c.bytes_formula for _, c in ring)) + "×" if ring
                    else "not measured"))
    longest = rep.longest_wait()
    rows.append(Row(f"barrier: longest wait (rank {longest.rank})" if longest else "barrier: longest wait",
                    seconds(longest.waited_s) if longest else "not measured"))
    best = sweep.best
    rows.append(Row(f"all_reduce busbw, best size ({size_label(best['bytes'])})" if best else "all_reduce busbw, best size",
                    f"{num(best['busbw_gbps'])} GB/s" if best else "not measured"))
    ok = practice.launch.ok
    rows.append(Row("no_sync: bytes per optimizer step ÷ syncing every micro-batch",
                    num(practice.no_sync_ratio()) + "×" if ok else "not measured"))
    rows.append(Row("PowerSGD bytes ÷ fp32 all-reduce", num(practice.powersgd_ratio()) + "×" if ok else "not measured"))
    return Summary(tuple(rows))
