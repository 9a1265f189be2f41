"""Tests of `perflab.plan.cluster`: the GPU and its nodes, bus bandwidth across NICs, NCCL's ring latency."""

from __future__ import annotations

import pytest

from perflab.core.errors import InputError
from perflab.core.hardware import spec_peak
from perflab.plan.cluster import cluster, gpu_ids


def test_the_cluster_comes_from_the_hardware_and_link_tables():
    c = cluster("h100")
    assert c.gpu_id == "h100-sxm" and c.peak("bf16") == pytest.approx(989.4) and c.memory_bytes == 80e9
    assert c.peak("bf16") == spec_peak("h100-sxm", "bf16").tflops and "H100" in c.peak_source("bf16")  # the one look-up
    assert c.as_dict()["peak_tflops"] == {"fp64": 33.5, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4,
                                          "fp8": 1978.9}
    assert c.intra_gbps == 450 and c.inter_gbps == 50 and c.gpus_per_node == 8 and c.nics_per_node == 8
    with pytest.raises(InputError, match="--gpu 'h1000' is not a GPU perflab can plan for"):
        cluster("h1000")


def test_every_gpu_the_error_offers_can_be_planned():
    """The list `--gpu` offers holds only GPUs with links (a V100 has no NVLink 2 or EDR row in lesson 06's
    table, so it is not offered)."""
    for gid in gpu_ids():
        assert cluster(gid).intra_gbps > 0
    assert "v100" not in gpu_ids()
    with pytest.raises(InputError) as e:
        cluster("v100")
    assert "v100" not in str(e.value).partition("use one of")[2]


def test_a_group_across_nodes_uses_every_nic_its_gpus_sit_by():
    """NCCL spreads its rings over the node's NICs (tuning.cc: busBw = channels × bandwidth per channel):
    8 GPUs per node with a NIC each move 8 × one NIC, capped by NVLink; a group with one GPU per node
    (tensor parallelism over the node) has one NIC."""
    h = cluster("h100")
    assert h.busbw_gbps(8) == 450  # inside a node: NVLink
    assert h.busbw_gbps(16) == h.busbw_gbps(128) == 400  # 8 × 50 GB/s NDR, under NVLink's 450
    assert h.busbw_gbps(8, stride=2) == 4 * 50  # 4 ranks of the group per node: 4 NICs
    assert h.busbw_gbps(32, stride=8) == 50  # one rank per node
    narrow = cluster("h100", nics_per_node=1)
    assert narrow.busbw_gbps(16) == 50


def test_the_busbw_across_dgx_a100_nodes_is_what_nccls_maintainer_measured():
    """NVIDIA/nccl issue 812: 'On an Nvidia DGX-A100 system we have 8x200Gbit/s IB cards and we measure
    192GB/s AllReduce BusBW.' The model's 8 × 25 GB/s lands within 5 % of it."""
    a = cluster("a100")
    assert a.busbw_gbps(32) == pytest.approx(192, rel=0.05)


def test_nccls_ring_latency_grows_with_its_steps():
    """tuning.cc (Ring, Simple): 8.4 µs + steps × 3.4 µs over NVLink, the steps that cross nodes at 14 µs
    (an all-gather's ring has n − 1 steps, nodes − 1 of them between nodes; an all-reduce twice as many)."""
    h = cluster("h100")
    assert h.latency_s("all_gather", 1) == 0
    assert h.latency_s("all_gather", 8) == pytest.approx((8.4 + 7 * 3.4) * 1e-6)
    assert h.latency_s("all_reduce", 8) == pytest.approx((8.4 + 14 * 3.4) * 1e-6)
    # 64 ranks on 8 nodes: 63 steps, 7 of them between nodes
    assert h.latency_s("all_gather", 64) == pytest.approx((8.4 + 56 * 3.4 + 7 * 14.0) * 1e-6)
    assert h.latency_s("all_gather", 64) > h.latency_s("all_gather", 8)


def test_the_user_names_the_nodes():
    c = cluster("h100", gpus_per_node=4, nics_per_node=2, nic="ib-hdr-200")
    assert (c.gpus_per_node, c.nics_per_node, c.inter_gbps) == (4, 2, 25)
    assert c.busbw_gbps(8) == 2 * 25
    assert cluster("h100", nic=12.5).inter_gbps == 12.5
    with pytest.raises(InputError, match="--nic 'nvlink4-h100' is a link inside a node"):
        cluster("h100", nic="nvlink4-h100")
    with pytest.raises(InputError, match="--gpus-per-node must be a whole number"):
        cluster("h100", gpus_per_node=0)
