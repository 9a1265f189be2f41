"""Lab 08: its checks accept the reference answer and reject each plausible mistake with a hint."""

from __future__ import annotations

import pytest

from perflab.grading.checks import LabCheckError
from perflab.numa import lab08, plan
from perflab.numa import lab08 as lab
from perflab.numa.plan import split_node


def cores_of(cpus, siblings):
    """The node's cores, each a sorted list of its threads on this node, in order of first thread."""
    seen, cores = set(), []
    for c in sorted(cpus):
        if c not in seen:
            core = sorted(t for t in siblings.get(c, [c]) if t in cpus) or [c]
            seen.update(core)
            cores.append(core)
    return cores


def reference(cpus, n_ranks, siblings):
    cores = cores_of(cpus, siblings)
    if len(cores) < n_ranks:  # fewer cores than ranks: share threads, first threads first
        flat = [c[0] for c in cores] + [t for c in cores for t in c[1:]]
        return [flat[r * len(flat) // n_ranks:(r + 1) * len(flat) // n_ranks] for r in range(n_ranks)]
    out = []
    for r in range(n_ranks):
        block = cores[r * len(cores) // n_ranks:(r + 1) * len(cores) // n_ranks]
        out.append([c[0] for c in block] + sorted(t for c in block for t in c[1:]))
    return out


def round_robin(cpus, n_ranks, siblings):  # rank 0 gets cores 0, 4, 8, ...
    cores = cores_of(cpus, siblings)
    return [[c[0] for c in cores[r::n_ranks]] + sorted(t for c in cores[r::n_ranks] for t in c[1:])
            for r in range(n_ranks)]


def blocks_of_cpus(cpus, n_ranks, siblings):  # ignores the siblings input: cuts the sorted CPU list
    s = sorted(cpus)
    return [s[r * len(s) // n_ranks:(r + 1) * len(s) // n_ranks] for r in range(n_ranks)]


def remainder_to_last(cpus, n_ranks, siblings):  # off by one in the sharing: the last rank takes the rest
    cores = cores_of(cpus, siblings)
    k = len(cores) // n_ranks
    parts = [cores[r * k:(r + 1) * k] for r in range(n_ranks - 1)] + [cores[(n_ranks - 1) * k:]]
    return [[c[0] for c in p] + [t for c in p for t in c[1:]] for p in parts]


def threads_in_core_order(cpus, n_ranks, siblings):  # each core's threads together: 0, 1, 2, 3 ...
    return [[t for c in p for t in c] for p in
            (lambda cores: [cores[r * len(cores) // n_ranks:(r + 1) * len(cores) // n_ranks]
                            for r in range(n_ranks)])(cores_of(cpus, siblings))]


def first_threads_only(cpus, n_ranks, siblings):  # a missing term: leaves the second threads out
    return [[c[0] for c in p] for p in
            (lambda cores: [cores[r * len(cores) // n_ranks:(r + 1) * len(cores) // n_ranks]
                            for r in range(n_ranks)])(cores_of(cpus, siblings))]


def siblings_half_way(cpus, n_ranks, siblings):  # the wrong convention: "second threads are numbered after all firsts"
    s = sorted(cpus)
    half = len(s) // 2
    guess = {c: sorted({c, s[(i + half) % len(s)]}) for i, c in enumerate(s)} if len(s) % 2 == 0 else {}
    return reference(cpus, n_ranks, guess)


def calls_perflab(cpus, n_ranks, siblings):

    return plan.split_node(cpus, n_ranks, siblings)


@pytest.mark.parametrize("split", [None, "0-3", [[0, 1]], {0: [0, 1], 1: [2, 3]}])
def test_lab08_refuses_a_split_that_is_not_one_list_per_rank(split):
    assert lab08.rule_problems(split, [0, 1, 2, 3], 2, {}) == \
        [f"expected a list of 2 lists (one per rank), got {split!r}"]


def test_reference_passes():
    assert lab.check_split_node(reference)


@pytest.mark.parametrize("mutant, kind", [
    (round_robin, "rule 5"), (blocks_of_cpus, "rule 2"), (remainder_to_last, "rule 3"),
    (threads_in_core_order, "rule 4"), (first_threads_only, "rule 1"), (siblings_half_way, "rule 5"),
    (calls_perflab, "split_node, which computes"),
])
def test_mutants_are_refused_by_rule(mutant, kind):
    with pytest.raises(LabCheckError, match="split_node") as e:
        lab.check_split_node(mutant)
    assert kind in str(e.value)


def test_round_robin_names_the_mistake():
    with pytest.raises(LabCheckError, match="round-robin"):
        lab.check_split_node(round_robin)


def test_split_node_rules_hold_on_every_lab_case():
    for _, cpus, n, sib in lab08.CASES:
        assert lab08.rule_problems(split_node(cpus, n, sib), cpus, n, sib) == []


def test_lab_check_grades():
    assert lab08.check_split_node(reference)
    with pytest.raises(lab08.LabCheckError, match="perflab's own"):
        lab08.check_split_node(split_node)
    assert not lab08.check_split_node(lambda cpus, n, sib: (_ for _ in ()).throw(NotImplementedError()))
    with pytest.raises(lab08.LabCheckError, match="rule 1"):
        lab08.check_split_node(lambda cpus, n, sib: [part[:-1] if r == n - 1 else part
                                                     for r, part in enumerate(reference(cpus, n, sib))])
    with pytest.raises(lab08.LabCheckError, match="rule [235]"):  # round-robin: cores split, not neighbours
        lab08.check_split_node(lambda cpus, n, sib: [cpus[r::n] for r in range(n)])
