"""Tests of `perflab.distributed.torchrun`."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import pytest
import torch

from perflab.core.errors import InputError
from perflab.distributed import torchrun as T
from perflab.distributed import torchrun as dist
from perflab.distributed.torchrun import DistRunError, LaunchResult, RankOutcome
from perflab.profiling import faults, trace

from .helpers import GLOO, assert_all_gone


def _result(ranks, *, timed_out=False, returncodes=(0,), agent_output="", nproc=None):
    return LaunchResult("perflab.distributed.workers.faulty", nproc or len(ranks), 1, GLOO, [["python", "-m", "x"]], 2.0,
                        30.0, timed_out, list(returncodes), ranks=ranks, agent_output=agent_output)


matplotlib.use("Agg")


def test_the_fixed_comm_run_passes_fixed_to_its_ranks(monkeypatch, tmp_path):
    from perflab.distributed import torchrun

    seen = {}

    class Result:
        results = [{"wall_s": [0.25, 0.5]}, None]
        backend = SimpleNamespace(name="gloo")
        seconds = 3.5

        def raise_for_status(self):
            pass

    def launch(module, *, nproc, args, timeout, backend, env):
        seen.update(module=module, nproc=nproc, args=args, backend=backend)
        Path(args[args.index("--trace-out") + 1]).write_text(json.dumps(trace.synthetic_step("communication")))
        return Result()

    monkeypatch.setattr(torchrun, "launch", launch)
    path = tmp_path / "comm.json"
    run = faults.profile_step(fault="comm", fixed=True, steps=2, trace_out=path)
    assert seen == {"module": "perflab.profiling.comm_worker", "nproc": 2, "backend": "gloo",
                    "args": ["--preset", "tiny-gpt", "--steps", 2, "--batch", 4, "--seq", 64, "--trace-out",
                             str(path.resolve()), "--fixed"]}
    info = {k: v for k, v in run.info.items() if k not in ("quietness", "waited_s")}  # the machine's, not the run's
    assert (run.fixed, run.wall_s, info) == (True, [0.25, 0.5], {"ranks": 2, "backend": "gloo", "launch_s": 3.5})
    assert run.info["quietness"]["verdict"] in ("quiet", "disturbed", "unknown") and run.info["waited_s"] >= 0
    assert run.diagnosis.top is not None and run.diagnosis.top.cause == "communication"


# ----------------------------------------------------------------------------- backend choice
@pytest.mark.parametrize("gpus, nproc, backend, name, reason", [
    (2, 2, None, "nccl", "2 GPU(s) for 2 ranks: NCCL, one GPU per rank"),
    (2, 4, None, "gloo", "4 ranks but only 2 GPU(s): NCCL needs one GPU per rank"),
    (2, 2, "nccl", "nccl", "asked for nccl: 2 ranks on 2 GPU(s)"),
])
def test_choose_backend_with_gpus(monkeypatch, gpus, nproc, backend, name, reason):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    c = T.choose_backend(nproc, backend)
    assert c.name == name and c.device == ("cuda" if name == "nccl" else "cpu") and c.reason.startswith(reason)


def test_nccl_with_fewer_gpus_than_ranks_says_what_to_use(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(InputError, match="4 ranks but 2 GPU.s. here; use --nproc 2 or --backend gloo"):
        T.choose_backend(4, "nccl")


def test_launch_timeout_must_be_a_number():
    with pytest.raises(InputError, match="timeout must be a number of seconds .got 'soon'."):
        T.launch("perflab.distributed.workers.faulty", 2, timeout="soon")  # pyright: ignore[reportArgumentType]  # the bad input under test


def test_slurm_script_names_the_partition():
    text = T.slurm_script("perflab.distributed.workers.ddp", nodes=2, gpus_per_node=8, partition="gpu")
    assert "#SBATCH --partition=gpu\n" in text and "--nproc-per-node=8" in text


def test_run_worker_raises_with_the_report(monkeypatch):
    bad = _result([RankOutcome(0, "raised", error="ValueError: boom")], returncodes=[1])
    good = _result([RankOutcome(0, "ok")])
    monkeypatch.setattr(T, "launch", lambda *a, **kw: bad)
    with pytest.raises(DistRunError, match="rank 0 raised ValueError: boom") as e:
        T.run_worker("perflab.distributed.workers.faulty", 1)
    assert e.value.result is bad
    monkeypatch.setattr(T, "launch", lambda *a, **kw: good)
    assert T.run_worker("perflab.distributed.workers.faulty", 1) is good


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


def test_gpu_ranks_are_never_forked(monkeypatch):
    """torchrun's LaunchConfig asks torch.cuda.is_available() in the agent; a rank forked after that
    cannot use CUDA, so GPU ranks are exec'd by plain torchrun even where CPU ranks are forked."""
    monkeypatch.setenv("PERFLAB_LAUNCH", "fork")
    assert dist.launch_agent("cuda") == "torch.distributed.run"
    if sys.platform.startswith("linux"):
        assert dist.launch_agent("cpu") == "perflab.distributed.agent"


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


def test_launcher_binds_every_rank():
    from perflab.distributed.torchrun import launch

    n = min(2, len(os.sched_getaffinity(0)))
    res = launch("perflab.distributed.workers.faulty", n, ["--work-s", "0.01"], timeout=120, bind=True)
    assert res.ok, res.report()
    outs = [r.stdout for r in res.ranks]
    assert all("[perflab.numa.bound] rank" in o for o in outs), outs
    cpus = [o.split("→ ")[1].split(" ")[0] if "→" in o else o.split("--physcpubind=")[1].split()[0] for o in outs]
    assert len(set(cpus)) == n  # no two ranks on the same cores
