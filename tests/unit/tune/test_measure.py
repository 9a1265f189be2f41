"""Tests of `perflab.tune.measure`: one configuration measured, alone or interleaved."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from perflab.core.errors import InputError
from perflab.flops import mfu
from perflab.tune import measure, rows
from perflab.tune.changes import apply_rung
from perflab.tune.config import StepConfig

from .helpers import CPU, SMOKE


def test_measure_config_on_numa_node_0_reports_progress(monkeypatch):
    from perflab.numa import topology

    seen = []
    sc = StepConfig(micro_batch=4, numa_node=0)  # node 0 exists on every Linux machine
    cpus = next(n.cpus for n in topology.read_topology().nodes if n.id == 0)
    real_bound = measure.bound_to
    monkeypatch.setattr(measure, "bound_to", lambda c: (seen.append(("cpus", c)), real_bound(c))[1])
    m = measure.measure_config(SMOKE, sc, steps=1, warmup=1, device=CPU, profile=False, progress=seen.append)
    assert ("cpus", cpus) in seen and [x for x in seen if isinstance(x, str)] == ["step 1/2", "step 2/2"]
    assert m.step_s > 0 and len(m.losses) == 2 and m.compile_s is None
    with pytest.raises(InputError, match="micro-batch 3 does not divide the global batch 8"):
        measure.measure_config(SMOKE, replace(sc, micro_batch=3), steps=1, warmup=0, device=CPU, profile=False)


def test_a_compiled_rung_reports_its_compile_time(monkeypatch):
    real = torch.compile
    # dynamo alone (backend "eager"): the first step still pays the tracing, without inductor's code generation
    monkeypatch.setattr(torch, "compile", lambda model, **kw: real(model, backend="eager"))
    torch._dynamo.reset()
    traced = []
    try:
        m = measure.measure_config(SMOKE, StepConfig(micro_batch=8, compiled=True), steps=1, warmup=1,
                                   device=CPU, profile=False)
        traced.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    finally:
        torch._dynamo.reset()
    # the first step's extra time over the median step (how much more it is depends on the machine's
    # load, so only what load cannot change is asserted: it is reported, and dynamo did trace graphs)
    assert m.compile_s is not None and m.compile_s >= 0.0
    assert traced and traced[0] > 0


@pytest.mark.usefixtures("watch_all_cores")
def test_a_rung_timed_on_a_busy_machine_is_inconclusive_and_says_so(tmp_path):
    """Made-up load (counters injected): every block is disturbed, so no verdict whatever the steps
    measured; the row carries the quietness of the blocks and the reason."""
    from perflab.core.quietness import MadeUpLoad, injected

    base = StepConfig(micro_batch=SMOKE.micro_batch)
    cand = apply_rung("adamw", base, SMOKE, CPU, []).config
    with injected(MadeUpLoad(0.6)):
        pm = measure.measure_pair(SMOKE, base, cand, min_pairs=1, warmup=1, device=CPU, budget_s=0.3, profile=False)
    assert pm.verdict == "inconclusive" and pm.decision is not None and pm.decision.busy and pm.decision.kept == 0
    assert pm.decision.text().startswith("inconclusive: the machine was busy (other programs used 60 % of")
    assert pm.candidate.quietness.disturbed and pm.waited_s >= 0.0
    prev_row = {"rung": "baseline", "step_s": pm.candidate.step_s, "speedup_vs_baseline": 1.0, "loss": pm.candidate.loss,
                "breakdown": {}}
    r = mfu.Basis(0.1, "measured ceiling", "fp32", "fastest of 5", "2026-01-01", (1, 2, 3), 1)
    row = rows.rung_row("adamw", apply_rung("adamw", base, SMOKE, CPU, []), pm.candidate, prev_row,
                        None, r, SMOKE, CPU, pm)
    assert row["verdict"] == "inconclusive" and row["busy"] and row["quietness"]["verdict"] == "disturbed"
    assert all(not b["kept"] and b["quietness"]["verdict"] == "disturbed" for b in row["blocks"])
    assert row["explain"].startswith("inconclusive: the machine was busy (other programs used 60 % of")
