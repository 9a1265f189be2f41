"""Apply the ladder's rungs to one training step, cumulatively, and measure every rung.

    >>> res = run_ladder("cpu")                       # every rung; resumes from saved rungs
    >>> res = run_ladder("cpu", rungs="sdpa,compile", fresh=True)
    >>> res.rows[-1]["speedup_vs_baseline"], res.fastest["rung"]

Each rung's row: `rung`, `step_s` (median wall seconds of one optimizer step, data wait included),
`tokens_per_s`, `mfu`/`hfu` (against the spec peak of the dtype that ran where the spec sheet has
one, else against the ceiling measured for that dtype by the rule the audit and the lessons share:
`mfu_basis` says which and `mfu_basis_label` names it with its figure and date,
`perflab.flops.mfu.mfu_basis`; above 100 % no figure, `mfu_suspect` says why), `peak_bytes`, `loss` (after
warmup + steps optimizer steps), `loss_delta` (against the baseline's), `parity_ok` (within the
dtype's tolerance, `perflab.compiler.parity`), `speedup_vs_previous` (the median per-pair ratio of the
interleaved timing) with its `interval`, `speedup_vs_baseline` (the product of the adopted rungs'
ratios), `verdict` ('adopted', 'kept out', 'inconclusive', 'n/a' or 'broke parity', see
`perflab.tune.verdict`), `adopted`, `noisy` (untouched categories that moved beyond the stated noise),
`explain` and `note`, plus the step's phases and the waterfall's breakdown.

A rung that does not apply here (NUMA binding on one node, checkpointing where memory does not need
it) is recorded with `applicable: false`, its reason, and the figures of the configuration it leaves
unchanged (`measured: false`). Rows are saved as they are measured (`perflab.core.results`), so a
ladder stopped halfway resumes; `fresh=True` sets the old file aside and measures again.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from perflab.core.dtypes import native_bf16
from perflab.core.errors import InputError, PerflabError
from perflab.core.jsonable import JSON
from perflab.core.validate import positive_int
from perflab.flops.mfu import Basis, mfu_basis
from perflab.tune.changes import apply_rung, memory_budget
from perflab.tune.config import StepConfig, WrittenOutAttention
from perflab.tune.ladder import TunePreset, parse_rungs
from perflab.tune.ladder import preset as tune_preset
from perflab.tune.ladder import rung as rung_of
from perflab.tune.measure import measure_config, measure_pair
from perflab.tune.rows import FIELDS, drift_note, parity_index, rung_row, tolerance_for
from perflab.workload.optim import fused_adamw_available

# names other rooms read from here (the audit's recommendations, the regression hunt, tools/bench_trust.py,
# lesson 11 and lab 11); the ladder's parts live in config, changes, measure and rows
__all__ = ["FIELDS", "LadderResult", "StepConfig", "WrittenOutAttention", "apply_rung", "drift_note",
           "fused_adamw_available", "measure_config", "measure_pair", "memory_budget", "native_bf16", "run_ladder",
           "tolerance_for"]


@dataclass
class LadderResult:
    """A ladder's run: its rows (one per rung, the records of its results file, `perflab.tune.rows`),
    why it stopped early if it did, and how many rungs were measured now or read back."""

    preset: str
    device: str
    rows: list[dict[str, Any]]
    stopped: str | None  # why the ladder stopped early (a parity failure), else None
    path: str
    measured: int = 0
    resumed: int = 0

    @property
    def baseline(self) -> dict[str, Any]:
        return self.rows[0]

    @property
    def fastest(self) -> dict[str, Any]:
        ok = [r for r in self.rows if r.get("parity_ok")]
        return min(ok, key=lambda r: r["step_s"])

    @property
    def final(self) -> dict[str, Any]:
        """The configuration the ladder ends with (the last adopted rung)."""
        adopted = [r for r in self.rows if r.get("adopted")]
        return adopted[-1] if adopted else self.rows[0]

    def table(self):
        import pandas as pd

        return pd.DataFrame([{k: r.get(k) for k in FIELDS + ("adopted", "note")} for r in self.rows])

    def frame(self):
        """The rows for a person: every figure rounded, with its unit, and each rung's verdict with its
        interval (`perflab.tune.verdict`). MFU/HFU are against `basis()`; above 100 % is never shown
        without its reason."""
        import pandas as pd

        from perflab.core.readout import mib, num, seconds

        out = []
        for r in self.rows:
            lo_hi = r.get("interval")
            vs_prev = "–" if r["rung"] == "baseline" else (
                f"{r['speedup_vs_previous']:.2f}× ({lo_hi[0]:.2f}–{lo_hi[1]:.2f})"
                if lo_hi and r.get("measured") and math.isfinite(lo_hi[1])
                else f"{r.get('speedup_vs_previous', 1.0):.2f}×")
            out.append({"rung": r["rung"], "step": seconds(r["step_s"]), "tokens/s": num(r["tokens_per_s"]),
                        "MFU": _pct(r.get("mfu")), "HFU": _pct(r.get("hfu")), "peak memory": mib(r["peak_bytes"]),
                        "loss Δ vs baseline": f"{r['loss_delta']:+.1e}",
                        f"vs previous ({_conf(self.rows)} interval)": vs_prev,
                        "vs baseline": f"{r['speedup_vs_baseline']:.2f}×", "verdict": (r.get("verdict") or (
                            "adopted" if r.get("adopted") else "kept out")) + (" (machine busy)" if r.get("busy") else "")})
        return pd.DataFrame(out)

    def told_rungs(self) -> list[dict[str, Any]]:
        """The rungs after the baseline whose speed-up can be told: all but those the machine's load left
        inconclusive (`busy`; no verdict from a busy machine)."""
        return [r for r in self.rows[1:] if told(r)]

    def explain_table(self):
        """Each rung after the baseline: its verdict and what it did here, in the sentences its row carries."""
        import pandas as pd

        return pd.DataFrame([{"rung": r["rung"], "verdict": r.get("verdict", "n/a"), "here": r.get("explain") or r["note"]}
                             for r in self.rows[1:]])

    def baseline_line(self) -> str:
        """The baseline's step time, tokens/s and MFU with its basis, in one line."""
        from perflab.core.readout import num, seconds
        from perflab.flops.mfu import shown_utilization

        b = self.baseline
        return (f"step {seconds(b['step_s'])}, {num(b['tokens_per_s'])} tokens/s, "
                f"MFU {shown_utilization(b['mfu'], b['mfu_basis_label'])} against the {b['mfu_basis_label']}")

    def basis(self) -> str:
        """What the MFU/HFU columns are divided by, per dtype that ran (`perflab.flops.mfu.Basis`)."""
        seen: dict[str, str] = {}
        for r in self.rows:
            lab = r.get("mfu_basis_label")
            if lab and lab not in seen.values():
                seen[r.get("config", {}).get("dtype", "?")] = lab
        return "; ".join(seen.values()) or "unknown"

    def as_dict(self) -> JSON:
        """What `perflab tune --json` prints."""
        return {"preset": self.preset, "device": self.device, "rows": self.rows, "stopped": self.stopped,
                "results_file": self.path, "fastest": self.fastest["rung"] if self.rows else None}


def run_ladder(preset: str | TunePreset = "cpu", rungs: str | Sequence[str] | None = None, *, steps: int | None = None,
               batch: int | None = None, fresh: bool = False, device=None, path=None,
               progress: bool | Callable[[str], None] = False, profile: bool = True,
               budget_s: float | None = None) -> LadderResult:
    """Apply `rungs` (default: all, in the ladder's order) one after another and measure each,
    interleaved with the configuration it changes (`measure_pair`), until its verdict is decided or
    `budget_s` seconds (default: the preset's `rung_budget_s`) of timing are spent.

    steps: at least this many interleaved pairs per rung (default: the preset's). batch: the global
    batch in sequences (default: the preset's). A rung whose loss leaves the dtype's tolerance stops
    the ladder: `stopped` says which and by how much, and no later rung is measured.

    Every rung is saved as it is measured, keyed by the preset, the configuration it changes, its own
    configuration and the torch version, in `<results>/<host>/<device>/tune_<preset>.jsonl`: lesson 11,
    lab 11 and `perflab tune` read the same measurement of a rung, so they cannot disagree about it.
    `fresh=True` sets the file aside and measures everything again."""
    from pathlib import Path

    from perflab.core.device import describe, pick_device
    from perflab.core.results import run_sweep, sweep_path

    tp = tune_preset(preset) if isinstance(preset, str) else preset
    names = parse_rungs(rungs)
    min_pairs = max(tp.steps, positive_int("steps", steps)) if steps is not None else tp.steps
    if batch is not None:
        b = positive_int("batch", batch)
        if b % tp.micro_batch:
            raise InputError(f"--batch {b} is not a multiple of the baseline micro-batch {tp.micro_batch}: "
                             f"try {max(tp.micro_batch, b - b % tp.micro_batch)}")
        tp = replace(tp, global_batch=b)
    budget = tp.rung_budget_s if budget_s is None else float(budget_s)
    dev = torch.device(device) if device is not None else pick_device()
    info = describe(dev)
    p = Path(path) if path is not None else sweep_path(f"tune_{tp.name}", info.slug)
    if fresh and p.exists():
        p.rename(p.with_name(f"{p.stem}.{time.strftime('%Y%m%d-%H%M%S')}.jsonl"))
    say = _progress_printer(progress)
    bases: dict[str, Basis] = {}
    remeasured: set[str] = set()  # --fresh measures each dtype's ceiling again once (a new version)

    rows: list[dict[str, Any]] = []
    sc = StepConfig(micro_batch=tp.micro_batch)
    base: dict | None = None
    prev: dict | None = None  # the row of the configuration the next rung builds on
    stopped = None
    res_meas = res_skip = 0
    for i, name in enumerate(names):
        change = apply_rung(name, sc, tp, dev, rows)
        params = {"preset": tp.name, "model": tp.cfg.name, "global_batch": tp.global_batch, "warmup": tp.warmup,
                  "parity_step": parity_index(tp) + 1, "rung": name, "torch": torch.__version__,
                  "prev_config": None if prev is None else prev["config"], "config": change.config.as_dict(),
                  "applicable": change.applicable, "waterfall": bool(profile), "method": "interleaved blocks, watched"}

        def one(_p, i=i, name=name, change=change, prev=prev, base=base):
            if not change.applicable and prev is not None:
                return rung_row(name, change, None, prev, base, None, tp, dev)
            if say:
                say(f"[{i + 1}/{len(names)}] {name}: {rung_of(name).title} …")
            dt = change.config.dtype
            r = bases.get(dt) if not (fresh and dt not in remeasured) else None
            if r is None:  # the one rule every MFU shares (perflab.flops.mfu.mfu_basis), once per dtype
                r = bases[dt] = mfu_basis(dev, dt, remeasure=fresh and dt not in remeasured)
            remeasured.add(dt)
            with _quiet_compile():
                if prev is None:
                    m = measure_config(tp, change.config, steps=max(min_pairs, tp.steps), warmup=tp.warmup,
                                       device=dev, profile=profile, progress=None)
                    return rung_row(name, change, m, None, None, r, tp, dev)
                pm = measure_pair(tp, StepConfig(**prev["config"]), change.config, min_pairs=min_pairs,
                                  warmup=tp.warmup, device=dev, budget_s=budget, profile=profile, progress=None)
            return rung_row(name, change, pm.candidate, prev, base, r, tp, dev, pm)

        res = run_sweep(f"tune_{tp.name}", [params], one, path=p, retry_failed=True, progress=False)
        if res.interrupted or not res.rows:
            stopped = "interrupted: run the same command again to resume"
            break
        row = res.rows[0]
        res_meas += res.measured
        res_skip += res.skipped
        if row.get("status") != "ok":
            raise PerflabError(f"rung {name!r} failed: {row.get('reason')}")
        row = {k: v for k, v in row.items() if k not in ("params",)}
        rows.append(row)
        if say:
            state = row.get("verdict", "")
            say(f"[{i + 1}/{len(names)}] {name}: {state}"
                + (f" (resumed from {p.name})" if res.skipped else "")
                + (f", {row['speedup_vs_previous']:.2f}× the step before" if i else ""))
        if base is None:
            base = row
        if row.get("measured") and not row.get("parity_ok"):
            stopped = (f"rung {name!r} broke parity: loss {row['loss']:.6g} vs the baseline's {base['loss']:.6g} "
                       f"(relative {row['loss_rel']:.1e} > tolerance {row['tolerance']:.0e} for {row['config']['dtype']}); "
                       "the ladder stops here: find what changed the model before going on")
            break
        if row.get("adopted") or prev is None:
            prev = row
            sc = StepConfig(**row["config"])
    if say and not stopped:
        say(f"[{len(names)}/{len(names)}] done: {len(rows)} rung(s), {res_meas} measured, {res_skip} resumed")
    return LadderResult(tp.name, info.name, rows, stopped, str(p), res_meas, res_skip)


def told(row: dict[str, Any]) -> bool:
    """Whether a ladder row's figure may be told: a rung's, unless the machine's load left it inconclusive
    (`busy`); the baseline's (a single measurement), unless its machine was disturbed."""
    if row.get("verdict") == "reference":
        return (row.get("quietness") or {}).get("verdict") != "disturbed"
    return not row.get("busy")


def describe(tp: TunePreset) -> str:
    """What the lesson climbs: the preset, its batches, pairs, timing budget and memory budget, the verdicts'
    and the noise's rules, and where the rows are saved."""
    from perflab.tune import verdict

    budget = f"{tp.memory_budget_bytes / 2**20:.0f} MiB" if tp.memory_budget_bytes else "the GPU's free memory"
    return "\n".join([
        f"preset {tp.name}: {tp.note}",
        f"global batch {tp.global_batch} sequences × {tp.seq} tokens; baseline micro-batch {tp.micro_batch}; "
        f"{tp.warmup} warmup step(s), then at least {max(tp.steps, verdict.min_pairs())} interleaved pairs per rung "
        f"and at most {tp.rung_budget_s:g} s of timing; memory budget {budget}",
        f"Verdicts: {verdict.rule()}.", f"Noise: {verdict.noise_rule()}.",
        f"Lesson 11, lab 11 and `perflab tune --preset {tp.name}` read the same saved measurements (per machine, "
        "preset and torch version), so they give the same verdicts; `perflab tune --fresh` measures again."])


def _pct(f: float | None) -> str:
    from perflab.core.readout import percent

    if f is None:
        return "unknown"
    return percent(f) if f <= 1.0 else f"{percent(f)}: over its basis"


def _conf(rows) -> str:
    c = next((r.get("confidence") for r in rows if r.get("confidence")), 0.9)
    return f"{c * 100:.0f} %"


def _progress_printer(progress: bool | Callable[[str], None]) -> Callable[[str], None] | None:
    """A callable that reports progress: the one given, stderr for True, None for False."""
    if callable(progress):
        return progress
    if not progress:
        return None
    import sys

    def to_stderr(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    return to_stderr


@contextlib.contextmanager
def _quiet_compile():
    """torch.compile's and the DataLoader's warnings are the lesson's to explain, not noise to print."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
