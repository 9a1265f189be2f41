"""The torchrun launcher: every primitive on gloo with 2 and 4 ranks, a rank that raises, a rank that
hangs, a plain script, two simulated nodes — each ends with a clear report and nothing left running.

Starting ranks costs seconds (each imports torch), so each launch checks as much as it can.
"""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from perflab.core.errors import InputError
from perflab.distributed import collectives as C
from perflab.distributed import torchrun as dist


def assert_all_gone(res):
    alive = []
    for pid in res.pids:
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append((pid, p.name()))
        except psutil.NoSuchProcess:
            pass
    assert not alive, f"left running: {alive}"


def test_command_uses_a_file_rendezvous_and_no_port():
    cmd = dist.torchrun_command("perflab.distributed.workers.collectives", 4, ["--x", 1], rdzv_endpoint="/tmp/r", log_dir="/tmp/l")
    line = " ".join(cmd)
    assert "store_type=file" in line and "--local-addr 127.0.0.1" in line and "-m perflab.distributed.workers.collectives" in line
    assert "--master-port" not in line and "--standalone" not in line and "--redirects 3" in line
    env = dist.worker_env(__import__("pathlib").Path("/tmp/x"), "gloo")
    assert env["GLOO_SOCKET_IFNAME"] in ("lo", "lo0") and env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert env["OMP_NUM_THREADS"] and env["PYTHONUNBUFFERED"] == "1"


def test_cluster_commands_document_rendezvous():
    line = dist.cluster_command("train.py", 8, 4, ["--lr", "3e-4"])
    assert "--nnodes=4" in line and "--nproc-per-node=8" in line and "--rdzv-backend=c10d" in line
    assert "--rdzv-endpoint=$MASTER_ADDR:29500" in line and line.endswith("train.py --lr 3e-4")
    script = dist.slurm_script("perflab.distributed.workers.collectives", nodes=2, gpus_per_node=8)
    assert "#SBATCH --nodes=2" in script and "--ntasks-per-node=1" in script and "srun" in script
    assert "--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT" in script and "--rdzv-id=$SLURM_JOB_ID" in script
    assert "-m perflab.distributed.workers.collectives" in script


@pytest.mark.parametrize("call,needle", [
    (lambda: dist.launch("perflab.distributed.workers.faulty", 0), "nproc must be ≥ 1"),
    (lambda: dist.launch("perflab.distributed.workers.faulty", 2, timeout=0), "timeout must be > 0"),
    (lambda: dist.launch("no/such/script.py", 2), "not found"),
    (lambda: dist.launch("perflab.distributed.workers.faulty", 2, backend="mpi"), "unknown backend"),
    (lambda: dist.launch("perflab.distributed.workers.faulty", 100_000), "larger than the limit"),
])
def test_bad_launch_arguments(call, needle):
    with pytest.raises(InputError, match=needle):
        call()


def test_choose_backend_on_this_machine():
    import torch

    if not torch.cuda.is_available():
        c = dist.choose_backend(4)
        assert c.name == "gloo" and c.device == "cpu" and "no GPU" in c.reason
        with pytest.raises(InputError, match="needs CUDA GPUs"):
            dist.choose_backend(2, "nccl")
    elif torch.cuda.device_count() < 64:
        c = dist.choose_backend(64)
        assert c.name == "gloo" and "NCCL needs one GPU per rank" in c.reason


def test_parse_helpers():
    err = "Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\nZeroDivisionError: division by zero\n"
    assert dist.parse_exception(err) == "ZeroDivisionError: division by zero"
    dump = ("Current thread 0x01 (most recent call first):\n"
            '  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce\n'
            '  File "/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper\n'
            '  File "/w/faulty.py", line 34 in body\n')
    where, waiting = dist.parse_stack_dump(dump)
    assert where == "faulty.py:34 in body, inside all_reduce()" and waiting == "all_reduce"
    assert dist.parse_stack_dump('Current thread 0x01:\n  File "/w/faulty.py", line 31 in body\n') == ("faulty.py:31 in body", None)


@pytest.mark.slow
def test_every_primitive_gloo_2_ranks():
    rep = C.run_all(2, backend="gloo", timeout=240, check_k=1024, slow_s=0.15, ring_numel=1000)
    assert rep.launch.ok, rep.launch.report()
    s = rep.summary
    assert list(s["primitive"]) == list(C.PRIMITIVES) and s["ok"].all() and s["equivalent_ok"].all()
    assert rep.ok and rep.ring_ok
    for r in rep.ring_rows():  # uneven chunks: 1000 = 500 + 500 here; bytes as scheduled
        assert r["bytes_sent"] == r["bytes_exact"] == C.ring_bytes_sent(1000, 2, 4)[r["rank"]]
    timing = rep.barrier_rows()
    assert C.barrier_ok(timing, 0.15) and timing[0]["waited_s"] > timing[1]["waited_s"]
    # demos show what each rank held: broadcast from rank 0
    t = C.demo_table(rep.results, "broadcast")
    assert list(t["after"]) == ["[1, 2]", "[1, 2]"] and t["ok"].all()
    # nothing listened anywhere but on loopback (ranks and their torchrun agent)
    for r in rep.results:
        assert r["listening"], "no socket seen: the check itself did not work"
        assert all(a.startswith(("127.", "::1", "[::1]")) for a in r["listening"]), r["listening"]
    assert_all_gone(rep.launch)


@pytest.mark.slow
def test_every_primitive_gloo_4_ranks_cli_json():
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "perflab", "collectives", "--nproc", "4", "--backend", "gloo", "--json",
                        "--elements", "2048", "--slow-s", "0.1"], capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    d = json.loads(r.stdout)
    assert d["ok"] and d["nproc"] == 4 and d["backend"] == "gloo"
    assert [p["primitive"] for p in d["primitives"]] == list(C.PRIMITIVES)
    assert all(p["ok"] and p["equivalent_ok"] for p in d["primitives"])
    ring = d["ring_all_reduce"]
    assert ring["ok"] and all(x["bytes_sent"] == 2 * 3 * 2048 // 4 * 4 for x in ring["ranks"])
    assert d["barrier_with_slow_ranks"]["ok"]
    assert time.time() - t0 < 400


@pytest.mark.slow
def test_a_rank_that_raises_is_reported_and_the_rest_are_stopped():
    t0 = time.monotonic()
    res = dist.launch("perflab.distributed.workers.faulty", 3, ["--raise-on", "2"], timeout=120, backend="gloo")
    took = time.monotonic() - t0
    assert not res.ok and not res.timed_out and took < 120
    assert res.message.startswith("rank 2 raised ValueError: simulated failure in rank 2's compute step"), res.message
    bad = res.ranks[2]
    assert bad.status == "raised" and bad.step == "compute" and "rank 2: computing" in bad.stdout
    assert "ValueError" in bad.stderr  # its own traceback, in its own file
    report = res.report()
    assert "--- rank 2: raised" in report and "simulated failure" in report
    assert all(r.status != "ok" for r in res.ranks)  # the others never finished their all_reduce
    with pytest.raises(dist.DistRunError, match="rank 2 raised"):
        res.raise_for_status()
    assert_all_gone(res)


@pytest.mark.slow
def test_a_rank_that_hangs_ends_the_run_at_the_timeout():
    timeout = 12.0
    t0 = time.monotonic()
    res = dist.launch("perflab.distributed.workers.faulty", 3, ["--hang-on", "1"], timeout=timeout, backend="gloo")
    took = time.monotonic() - t0
    assert res.timed_out and not res.ok
    assert took < timeout + 10, took  # stopped at the deadline, plus a few seconds to collect
    msg = res.message
    assert f"did not finish within {timeout:g} s" in msg and "every process was stopped" in msg
    if all(r.started for r in res.ranks):  # on a very busy machine ranks may still be importing torch
        assert msg.startswith("rank 1 (last step 'compute', at faulty.py"), msg
        assert "were waiting for it in all_reduce()" in msg
        assert "stuck" in res.ranks[1].stdout and res.ranks[1].where.startswith("faulty.py:")
    assert_all_gone(res)


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["perflab.distributed.agent", "torch.distributed.run"])
def test_a_plain_script_and_its_failure(tmp_path, monkeypatch, agent):
    """Forked ranks (perflab's agent) and exec'd ranks (plain torchrun) tell the same story."""
    monkeypatch.setenv("PERFLAB_LAUNCH", "torchrun" if agent == "torch.distributed.run" else "fork")
    assert dist.launch_agent() == agent
    script = tmp_path / "plain.py"
    script.write_text(textwrap.dedent("""
        import os
        rank = int(os.environ["RANK"])
        print(f"plain script on rank {rank}", flush=True)
        if rank == 1:
            1 / 0
    """))
    res = dist.launch(str(script), 2, timeout=120)
    assert f"-m {agent} " in res.command
    assert not res.ok
    assert res.message.startswith("rank 1 raised ZeroDivisionError: division by zero"), res.report()
    assert "plain script on rank 1" in res.ranks[1].stdout
    assert_all_gone(res)


def test_agents_fork_only_where_the_main_module_is_safe_to_import_again(monkeypatch):
    import types

    from perflab.distributed import agent

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("PERFLAB_LAUNCH", raising=False)
    as_module = types.ModuleType("__main__")
    as_module.__spec__ = types.SimpleNamespace(name="pytest")  # python -m pytest, python -m perflab
    as_module.__file__ = "/x/pytest/__main__.py"
    plain_script = types.ModuleType("__main__")
    plain_script.__spec__, plain_script.__file__ = None, "/home/me/train.py"  # python train.py
    interactive = types.ModuleType("__main__")  # a REPL or a notebook kernel: no file to run again
    for main, want in ((as_module, True), (plain_script, False), (interactive, True)):
        monkeypatch.setitem(sys.modules, "__main__", main)
        assert agent.can_fork_agents() is want, main
    monkeypatch.setenv("PERFLAB_LAUNCH", "torchrun")
    assert agent.can_fork_agents() is False


@pytest.mark.slow
def test_launch_from_a_plain_script_without_a_main_guard(tmp_path):
    """A user's script that calls launch at its top level: multiprocessing would run it again in a
    forked agent, so agents start as plain processes there."""
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent("""
        from perflab.distributed import agent, torchrun
        res = torchrun.launch("perflab.distributed.workers.faulty", 2, timeout=120)
        print("forked agents:", agent.can_fork_agents(), "ok:", res.ok, "sums:", [r["sum"] for r in res.results])
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180,
                       env={**os.environ, "PYTHONPATH": str(Path(C.__file__).parents[2])})
    assert "forked agents: False ok: True sums: [[3.0, 3.0, 3.0, 3.0], [3.0, 3.0, 3.0, 3.0]]" in r.stdout, r.stdout + r.stderr


@pytest.mark.slow
def test_two_simulated_nodes_ddp_practice():
    """Two torchrun agents meet through one rendezvous (as two machines would); DDP practice runs on them."""
    from perflab.distributed import ddp

    res = dist.launch("perflab.distributed.workers.ddp", 1, ["--width", "128", "--steps", "3", "--hook-steps", "5"], nnodes=2,
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


@pytest.mark.gpu
def test_nccl_path_runs_on_gpus():
    import torch

    n = torch.cuda.device_count()
    rep = C.run_all(n, backend="nccl", timeout=300, check_k=4096, slow_s=0.1, ring_numel=4096)
    assert rep.ok, rep.launch.report()
    assert rep.launch.backend.name == "nccl" and rep.results[0]["device"].startswith("cuda")
    res = dist.launch("perflab.distributed.workers.ddp", n, ["--experiments", "init_memory"], timeout=300, backend="nccl")
    assert res.ok, res.report()
    stages = res.results[0]["init_memory"]["stages"]
    assert stages[-1]["gpu_used_bytes"] > stages[0]["gpu_used_bytes"]  # joining costs device memory
