"""Tests of `perflab.distributed.sizes`: lesson 06's row follows the backend its ranks get."""

import pytest
import torch

from perflab.distributed import sizes


def test_smoke_caps_the_ranks_and_keeps_its_sizes():
    s = sizes.for_lesson(4, "gloo", smoke=True)
    assert s.nproc == 2 and s.size is sizes.SIZES["smoke"] and s.line().startswith("2 ranks · backend gloo · ")
    assert s.size.message_sizes("all_reduce", 2) == [4096, 65536, 1048576] and not s.size.hang_demo
    assert s.size.per_node(2) == 1


def test_gloo_ranks_get_the_cpu_row_even_on_a_gpu_box(monkeypatch):
    # one GPU, four ranks: NCCL needs a GPU per rank, so the ranks run gloo on CPU tensors, and measure
    # the CPU's message sizes (up to 64 MiB), not the 1 GiB an NCCL node fills
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    s = sizes.for_lesson(4, None, smoke=False)
    assert s.backend.name == "gloo" and "NCCL needs one GPU per rank" in s.backend.reason
    assert s.size is sizes.SIZES["cpu"] and max(s.size.message_sizes("all_reduce", 4)) == 1 << 26
    assert s.size.per_node(4) == 2


def test_nccl_ranks_get_the_gpu_row(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    s = sizes.for_lesson(4, None, smoke=False)
    assert s.backend.name == "nccl" and s.size is sizes.SIZES["gpu"]
    assert max(s.size.message_sizes("all_reduce", 4)) == 1 << 30 and s.size.sweep_budget_s == 0.5


@pytest.mark.parametrize("kind", ["smoke", "cpu", "gpu"], ids=lambda k: f"row-{k}")
def test_every_row_is_whole(kind):
    s = sizes.SIZES[kind]
    assert s.check_k > 0 and s.ring_numel > 0 and s.ddp_width > 0 and s.sweep_budget_s > 0
