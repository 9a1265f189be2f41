"""Write a small data-parallel job's per-rank traces: plain `torch.distributed` (gloo) and `torch.profiler`, none
through perflab.

    python tests/corpus/make_job_traces.py      # rewrites tests/corpus/traces/gloo_job/

Four processes train one small MLP on their own batches and average the gradients with `all_reduce`
after every backward, as a hand-written data-parallel loop does; each profiles steps 3-5 with
`tensorboard_trace_handler` (gzip), the way a user profiles every rank of a job. Rank 3 is a planted
straggler: it does extra matrix products in every step (work that is not the model's, as a noisy
neighbour, a slower core or a larger shard would make it), so the other ranks wait for it in the
all-reduce.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

OUT = Path(__file__).parent / "traces" / "gloo_job"
WORLD = 4
STRAGGLER = 3
EXTRA_MATMULS = 12  # rank 3's extra work per step: 12 products of 256 × 256 matrices


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    a, b = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(OUT), worker_name=f"rank{rank}", use_gzip=True)) as prof:
        for _ in range(6):
            x, y = torch.randn(64, 256, generator=g), torch.randn(64, 256, generator=g)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            if rank == STRAGGLER:
                for _ in range(EXTRA_MATMULS):
                    a = torch.tanh(a @ b)
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= WORLD
            opt.step()
            prof.step()
    dist.barrier()
    del model, opt
    dist.destroy_process_group()


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    mp.spawn(rank_main, args=(free_port(),), nprocs=WORLD, join=True)
    print("\n".join(sorted(p.name for p in OUT.iterdir())))


if __name__ == "__main__":
    main()
