"""Tests of `perflab.classroom.ranks`: a learner's function on ranks that talk only through the judge,
which counts what each sends and keeps what each returns. (Confined, and attacked, in the class of
test_sandbox.py; here the ranks run unconfined, which changes nothing of what is counted.)"""

from __future__ import annotations

import torch

from perflab.classroom.ranks import run_ranks
from perflab.classroom.worker import Confinement

RING = '''
def ring_all_reduce(x, rank, world_size):
    n = world_size
    out = x.clone()
    chunks = out.view(-1).tensor_split(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    for s in range(n - 1):
        send_i, recv_i = (rank - s) % n, (rank - s - 1) % n
        incoming = torch.empty_like(chunks[recv_i])
        request = dist.isend(chunks[send_i].contiguous(), right)
        dist.recv(incoming, left)
        request.wait()
        chunks[recv_i].add_(incoming)
    dist.barrier()
    for s in range(n - 1):
        send_i, recv_i = (rank + 1 - s) % n, (rank - s) % n
        ops = [dist.P2POp(dist.isend, chunks[send_i], right), dist.P2POp(dist.irecv, chunks[recv_i], left)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    print("rank", rank, "done")  # what a rank prints goes to its output, never into the job's messages
    return out
'''
WAITS = '''
def ring_all_reduce(x, rank, world_size):
    if rank == 1:
        dist.all_reduce(x)
    t = torch.empty_like(x)
    dist.recv(t, (rank + 1) % world_size)
    return t
'''


def test_the_judge_counts_what_each_rank_sends_and_keeps_what_it_returns():
    inputs = [[torch.randn(12), torch.randn(3)] for _ in range(3)]
    run = run_ranks(RING, "ring_all_reduce", inputs, confine=Confinement(), timeout=120)
    assert run.ok and run.message == "", run
    for rep in run.ranks:
        assert rep.bytes_sent == [2 * 2 * 4 * 4, 2 * 2 * 1 * 4] and rep.sends == [4, 4]  # 2(N−1) chunks of K/N
        for i, got in enumerate(rep.outputs):
            assert torch.allclose(got, torch.stack([inp[i] for inp in inputs]).sum(0))
        assert "done" in rep.output and not rep.collectives


def test_a_collective_is_refused_and_a_rank_that_waits_forever_ends_the_run_at_once():
    run = run_ranks(WAITS, "ring_all_reduce", [[torch.ones(4)], [torch.ones(4)]], confine=Confinement(), timeout=120)
    assert not run.ok and "deadlocked" in run.message and run.seconds < 60, run
    assert run.ranks[1].collectives == ["all_reduce"] and "collective" in (run.ranks[1].error or "")
