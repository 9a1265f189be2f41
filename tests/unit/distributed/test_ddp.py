"""Tests of `perflab.distributed.ddp`."""

from __future__ import annotations

import matplotlib
import pytest
import torch

from perflab.distributed import ddp as D  # noqa: E402
from perflab.distributed import torchrun

from .helpers import assert_all_gone

matplotlib.use("Agg")


def test_comm_hooks_lets_a_refused_hook_through_unless_it_is_bf16(one_rank):
    with pytest.raises(TypeError, match="must be callable"):
        D.comm_hooks(one_rank, hooks=("fp16",), steps=1, width=8, depth=1, mbs=2,
                     choose_hook=lambda name, holder: (None, "not a function"))


# ----------------------------------------------------------------------------- ddp
def test_accumulation_table_counts_from_the_second_step():
    v = {"all_reduce_calls_per_step": [9, 4, 4], "bytes_per_step": [2e6, 2e6, 2e6], "step_s": [0.03, 0.01, 0.02]}
    one = {"all_reduce_calls_per_step": [1], "bytes_per_step": [5e5], "step_s": [0.004]}
    df = D.accumulation_table([{"grad_accumulation": {"sync every micro-batch": v, "no_sync": one, "LocalSGD": one}}])
    assert df.loc["sync every micro-batch", "all-reduce calls per step"] == 4
    assert df.loc["sync every micro-batch", "median step (ms)"] == pytest.approx(20.0)
    assert df.loc["no_sync", "all-reduce calls per step"] == 1
    assert df.loc["no_sync", "MB all-reduced per step"] == pytest.approx(0.5)


def test_memory_table_adds_gpu_columns_when_measured():
    cpu = {"init_memory": {"stages": [{"stage": "before", "rss_bytes": 2**21}, {"stage": "after", "rss_bytes": None}]}}
    gpu = {"init_memory": {"stages": [{"stage": "after", "rss_bytes": 2**20, "gpu_used_bytes": 3 * 2**20,
                                       "torch_reserved_bytes": 2**20}]}}
    df = D.memory_table([cpu, gpu])
    assert list(df["host RSS (MiB)"])[:1] == [2.0]
    assert df["host RSS (MiB)"].isna().tolist() == [False, True, False]
    assert df.loc[2, "GPU in use (MiB)"] == 3.0 and df.loc[2, "torch reserved (MiB)"] == 1.0


def test_ddp_helpers_refuse_what_cannot_work():
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(RuntimeError, match="unused parameter"):
        D._grad(p)
    with pytest.raises(KeyError):
        D.hook_for("int4", {})
    with pytest.raises(RuntimeError, match="no process group is initialised"):
        D.bf16_compress_equivalent(None, None)


@pytest.mark.slow
def test_two_simulated_nodes_ddp_practice():
    """Two torchrun agents meet through one rendezvous (as two machines would); DDP practice runs on them."""
    from perflab.distributed import ddp

    res = torchrun.launch("perflab.distributed.workers.ddp", 1, ["--width", "128", "--steps", "3", "--hook-steps", "5"], nnodes=2,
                      timeout=300, backend="gloo")
    assert res.ok, res.report()
    roles = ddp.roles_table(res.results)
    assert list(roles["node"]) == [0, 1] and list(roles["local_rank"]) == [0, 0]
    assert list(roles["is_main"]) == [True, False] and list(roles["is_local_main"]) == [True, True]
    assert "checkpoint" in roles.loc[0, "did"] and "checkpoint" not in roles.loc[1, "did"]
    acc = res.results[0]["grad_accumulation"]
    sync, quiet = acc["sync every micro-batch"], acc["no_sync"]
    assert acc["same_update"], acc["max_param_difference"]
    assert sum(sync["bytes_per_step"]) == acc["gas"] * sum(quiet["bytes_per_step"])  # GAS× fewer bytes
    assert sync["all_reduce_calls_per_step"][-1] == acc["gas"] * quiet["all_reduce_calls_per_step"][-1]
    hooks = ddp.hooks_table(res.results)
    assert hooks.loc["fp16", "bytes vs fp32 all-reduce"] == pytest.approx(0.5)
    assert hooks.loc["bf16", "bytes vs fp32 all-reduce"] == pytest.approx(0.5)
    assert hooks.loc["powersgd", "bytes vs fp32 all-reduce"] < 0.5
    assert hooks.loc["allreduce", "gradient rel. error"] < 1e-6 < hooks.loc["fp16", "gradient rel. error"] < 1e-2
    mem = res.results[0]["init_memory"]
    if mem["kind"] == "cpu":
        assert "no GPU" in mem["gpu_skipped_reason"] and all(s["rss_bytes"] > 0 for s in mem["stages"])
    assert_all_gone(res)


def test_the_lessons_practice_reads_for_a_person():
    from perflab.distributed.outcome import BackendChoice, LaunchResult, RankOutcome

    acc = {"gas": 4, "same_update": True, "max_param_difference": 7.5e-9, "LocalSGD_vs_sync_difference": 5.2e-4,
           "sync every micro-batch": {"all_reduce_calls_per_step": [4, 4], "bytes_per_step": [1.06e6] * 2, "step_s": [0.05] * 2},
           "no_sync": {"all_reduce_calls_per_step": [1, 1], "bytes_per_step": [2.65e5] * 2, "step_s": [0.01] * 2},
           "LocalSGD": {"all_reduce_calls_per_step": [1, 0], "bytes_per_step": [8.8e4] * 2, "step_s": [0.01] * 2}}
    hook = {"bytes_per_step": [2.65e5] * 3, "probe_step": 1, "step_s": [0.02] * 3, "grad_rel_error": 0.0, "loss": [1.1]}
    res = {"grad_accumulation": acc, "init_memory": {"stages": [{"stage": "before", "rss_bytes": 2**28}],
                                                     "gpu_skipped_reason": "no GPU in this job"},
           "comm_hooks": {"allreduce": hook, "bf16": {**hook, "bytes_per_step": [1.3e5] * 3, "note": "DDP refused it"}}}
    launch = LaunchResult("t", 1, 1, BackendChoice("gloo", "cpu", "test"), [], 1.0, 60.0, False, [0],
                          ranks=[RankOutcome(0, "ok", result=res)])
    p = D.Practice(launch)
    assert p.accumulation_line() == ("GAS = 4: no_sync gives the same parameters as syncing every micro-batch "
                                     "(largest difference 7.5e-09); LocalSGD drifts by 0.00052")
    assert p.accumulation_table().loc["no_sync", "MB all-reduced per step"] == "0.265"
    assert p.hook_notes() == "DDP refused it" and "note" not in p.hooks_table().columns
    assert p.hooks_table().loc["bf16", "bytes vs fp32 all-reduce"] == "0.491"
    assert p.memory_table().loc[0, "host RSS (MiB)"] == "256.0" and p.gpu_skipped_reason == "no GPU in this job"
    gpu = D.gpu_join_cost(2, "gloo", 60, p.gpu_skipped_reason)
    assert gpu.text() == "GPU memory of init_process_group: not measured — no GPU in this job" and gpu.table() is None
