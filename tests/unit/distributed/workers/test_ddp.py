"""Tests of `perflab.distributed.workers.ddp`."""

from __future__ import annotations

from argparse import Namespace

import torch.distributed as dist


def test_ddp_worker_joins_without_the_memory_probe(one_rank):
    from perflab.distributed.workers import ddp as worker

    out = worker.body(one_rank, Namespace(experiments="", gas=1, steps=1, hook_steps=4, width=8))
    assert set(out["seconds"]) == {"init"} and dist.is_initialized()
