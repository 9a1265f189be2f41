"""Tests of `perflab.distributed.summary`: lesson 06's closing table from made-up results."""

from perflab.distributed import collectives as C
from perflab.distributed import ddp as D
from perflab.distributed import summary
from perflab.distributed.busbw import BusbwRun
from perflab.distributed.outcome import BackendChoice, LaunchResult, RankOutcome


def _launch(results, ok=True):
    ranks = [RankOutcome(i, "ok" if ok else "raised", result=r) for i, r in enumerate(results)]
    return LaunchResult("t", len(results), 1, BackendChoice("gloo", "cpu", "test"), [], 1.0, 60.0, False,
                        [0 if ok else 1], ranks=ranks)


def test_a_run_that_measured_nothing_says_so_in_each_row():
    rep = C.CollectivesRun(_launch([None, None], ok=False), 0.2)
    sweep = BusbwRun("all_reduce", 2, "gloo", [{"bytes": 4096, "status": "error", "reason": "not measured"}])
    practice = D.Practice(_launch([None, None], ok=False))
    t = summary.what_you_measured(rep, sweep, practice).table()
    assert t.loc["primitives verified on 2 ranks (gloo)", "value"] == "0 of 9"
    assert (t["value"].iloc[1:] == "not measured").all()


def test_measured_figures_carry_their_units():
    rep = C.CollectivesRun(_launch([None]), 0.2)
    sweep = BusbwRun("all_reduce", 2, "gloo", [{"bytes": 1 << 20, "status": "ok", "seconds": 9e-4, "algbw_gbps": 1.17,
                                                "busbw_gbps": 1.17}])
    acc = {"all_reduce_calls_per_step": [4, 4], "bytes_per_step": [1e6, 1e6], "step_s": [0.01, 0.01]}
    quiet = {"all_reduce_calls_per_step": [1, 1], "bytes_per_step": [2.5e5, 2.5e5], "step_s": [0.01, 0.01]}
    hook = {"bytes_per_step": [1e6, 1e6], "probe_step": 0, "step_s": [0.01, 0.01], "grad_rel_error": 0.0, "loss": [1.0]}
    res = {"grad_accumulation": {"sync every micro-batch": acc, "no_sync": quiet, "LocalSGD": quiet},
           "comm_hooks": {"allreduce": hook, "powersgd": {**hook, "bytes_per_step": [2.5e4, 2.5e4]}}}
    t = summary.what_you_measured(rep, sweep, D.Practice(_launch([res]))).table()
    assert t.loc["all_reduce busbw, best size (1 MiB)", "value"] == "1.17 GB/s"
    assert t.loc["no_sync: bytes per optimizer step ÷ syncing every micro-batch", "value"] == "0.250×"
    assert t.loc["PowerSGD bytes ÷ fp32 all-reduce", "value"] == "0.0250×"
