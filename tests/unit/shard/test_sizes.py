"""Tests of `perflab.shard.sizes`: lesson 12's sizes by kind of run."""

from perflab.core.sizes import for_run
from perflab.shard.run import STRATEGIES
from perflab.shard.sizes import SIZES


def test_a_cpu_runs_the_gpus_sizes_and_smoke_mode_its_own():
    assert set(SIZES) == {"smoke", "gpu"}  # tiny-gpt's ranks: the same sizes on a CPU and a GPU
    assert for_run(SIZES, False, "cpu") is SIZES["gpu"] and for_run(SIZES, True, "cuda") is SIZES["smoke"]


def test_smoke_mode_leaves_tensor_parallelism_and_the_two_nodes_out():
    smoke, full = SIZES["smoke"], SIZES["gpu"]
    assert smoke.strategies == ("fsdp", "pp") and full.strategies == STRATEGIES
    assert not smoke.two_nodes and full.two_nodes and smoke.steps < full.steps
    for s in SIZES.values():
        assert 4 in s.microbatches  # the bubble's prediction asks for m = 4
        assert s.backward_ms == 2 * s.forward_ms
