"""Lab 06: the reference answers pass; each plausible wrong answer is refused with a hint naming its kind."""

import pytest

from perflab.core import grading
from perflab.core.grading import LabCheckError
from perflab.distributed import lab06 as lab


def ring_ref(numel, world_size, itemsize):
    return 2 * (world_size - 1) * numel / world_size * itemsize


def ring_large_n(numel, world_size, itemsize):
    return 2 * numel * itemsize


def ring_one_phase(numel, world_size, itemsize):
    return (world_size - 1) * numel / world_size * itemsize


def ring_ignores_itemsize(numel, world_size, itemsize):
    return 2 * (world_size - 1) * numel / world_size


def ring_off_by_one(numel, world_size, itemsize):
    return (2 * world_size - 1) * numel / world_size * itemsize


def ring_floor_division(numel, world_size, itemsize):
    return 2 * (world_size - 1) * (numel // world_size) * itemsize


def ring_naive_root(numel, world_size, itemsize):
    return 2 * (world_size - 1) * numel * itemsize


def ring_visible_only(numel, world_size, itemsize):  # right for the divisible sizes, 0 otherwise
    return ring_ref(numel, world_size, itemsize) if numel % world_size == 0 else 0.0


def ring_calls_perflab(numel, world_size, itemsize):
    from perflab.distributed.collectives import ring_bytes_formula

    return ring_bytes_formula(numel, world_size, itemsize)


FACTORS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
           "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}


def busbw_ref(op, nbytes, seconds, ranks):
    return nbytes / seconds / 1e9 * FACTORS[op](ranks)


def busbw_algbw(op, nbytes, seconds, ranks):
    return nbytes / seconds / 1e9


def busbw_gib(op, nbytes, seconds, ranks):
    return nbytes / seconds / 2**30 * FACTORS[op](ranks)


def busbw_allreduce_factor_everywhere(op, nbytes, seconds, ranks):
    return nbytes / seconds / 1e9 * 2 * (ranks - 1) / ranks


def busbw_divides(op, nbytes, seconds, ranks):
    return nbytes / seconds / 1e9 / FACTORS[op](ranks)


def busbw_broadcast_wrong(op, nbytes, seconds, ranks):
    f = (ranks - 1) / ranks if op == "broadcast" else FACTORS[op](ranks)
    return nbytes / seconds / 1e9 * f


def busbw_allreduce_missing_term(op, nbytes, seconds, ranks):
    f = (ranks - 1) / ranks if op == "all_reduce" else FACTORS[op](ranks)
    return nbytes / seconds / 1e9 * f


def busbw_calls_perflab(op, nbytes, seconds, ranks):
    from perflab.distributed import busbw

    return busbw.busbw_gbps(op, nbytes, seconds, ranks)


@pytest.fixture(autouse=True)
def _fresh():
    grading.reset()


def test_reference_answers_pass():
    assert lab.check_ring_bytes(ring_ref)
    assert lab.check_busbw(busbw_ref)


@pytest.mark.parametrize("mutant, kind", [
    (ring_large_n, "large-N limit"), (ring_one_phase, "one phase only"), (ring_ignores_itemsize, "not bytes"),
    (ring_off_by_one, "off-by-one"), (ring_floor_division, "integer division"), (ring_naive_root, "naive root"),
    (ring_visible_only, "Hint: each of the 2·(N−1) steps"), (ring_calls_perflab, "perflab's own ring_bytes_formula"),
])
def test_ring_bytes_mutants_are_refused_by_kind(mutant, kind):
    with pytest.raises(LabCheckError, match="ring bytes per rank") as e:
        lab.check_ring_bytes(mutant)
    assert kind in str(e.value)


@pytest.mark.parametrize("mutant, kind", [
    (busbw_algbw, "algorithm bandwidth"), (busbw_gib, "GiB/s"), (busbw_allreduce_factor_everywhere, "for every op"),
    (busbw_divides, "inverted factor"), (busbw_broadcast_wrong, "broadcast with"),
    (busbw_allreduce_missing_term, "all-reduce with (n−1)/n"), (busbw_calls_perflab, "perflab's own busbw_gbps"),
])
def test_busbw_mutants_are_refused_by_kind(mutant, kind):
    with pytest.raises(LabCheckError, match="bus bandwidth") as e:
        lab.check_busbw(mutant)
    assert kind in str(e.value)
