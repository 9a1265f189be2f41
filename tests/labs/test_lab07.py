"""Lab 07: its checks accept the reference answer and reject each plausible mistake with a hint."""

from __future__ import annotations

import pytest

from perflab.dataloading import lab07
from perflab.dataloading import lab07 as lab
from perflab.dataloading.shuffle import (
    LCGPermutation,
)
from perflab.grading.checks import LabCheckError


def _index(i, n, a, c, x0):
    """The lab's answer written out: F(i) walked with F until it is < n (F by stepping, fine at these sizes)."""
    m = 1 << max(2, (n - 1).bit_length())

    def F(j):
        x = x0
        for _ in range(j):
            x = (a * x + c) % m
        return x

    y = F(i)
    while y >= n:
        y = F(y)
    return y


def _right_for(calls: int):
    """Right the first `calls` times entry i of a permutation is asked, then 0: a cache that goes stale."""
    seen: dict = {}

    def lcg_index(i, n, a, c, x0):
        key = (i, n, a, c, x0)
        seen[key] = seen.get(key, 0) + 1
        return _index(i, n, a, c, x0) if seen[key] <= calls else 0
    return lcg_index


def modulus(n):
    return 1 << max(2, (n - 1).bit_length())


def state(j, m, a, c, x0):  # F(j) in O(log j) by squaring the affine map
    acc_a, acc_c, pa, pc = 1, 0, a, c
    while j:
        if j & 1:
            acc_a, acc_c = acc_a * pa % m, (acc_c * pa + pc) % m
        pa, pc = pa * pa % m, (pc * pa + pc) % m
        j >>= 1
    return (acc_a * x0 + acc_c) % m


def reference(i, n, a, c, x0):
    m = modulus(n)
    y = state(i, m, a, c, x0)
    while y >= n:
        y = state(y, m, a, c, x0)
    return y


def off_by_one(i, n, a, c, x0):
    m = modulus(n)
    y = state(i + 1, m, a, c, x0)
    for _ in range(m):  # F(n) need not lie on a cycle through a value < n: bound the walk
        if y < n:
            break
        y = state(y, m, a, c, x0)
    return y


def modulus_above_n(i, n, a, c, x0):  # 1 << n.bit_length(): 16 for n = 8
    m = 1 << max(2, n.bit_length())
    y = state(i, m, a, c, x0)
    while y >= n:
        y = state(y, m, a, c, x0)
    return y


def folds_instead_of_walking(i, n, a, c, x0):
    return state(i, modulus(n), a, c, x0) % n


def walks_one_step(i, n, a, c, x0):
    m = modulus(n)
    y = state(i, m, a, c, x0)
    while y >= n:
        y = (a * y + c) % m
    return y


def ignores_x0(i, n, a, c, x0):
    return reference(i, n, a, c, 0)


def naive_lcg_mod_n(i, n, a, c, x0):
    return (a * i + c) % n


def walks_once(i, n, a, c, x0):  # a special case: one walk is often enough, not always
    m = modulus(n)
    y = state(i, m, a, c, x0)
    return state(y, m, a, c, x0) if y >= n else y


def calls_perflab(i, n, a, c, x0):

    return LCGPermutation(n, 0)[i]


def _solution(i, n, a, c, x0):
    from perflab.dataloading.lab07 import modulus

    m = modulus(n)

    def state(j):
        x = x0
        for _ in range(j):
            x = (a * x + c) % m
        return x

    y = state(i)
    while y >= n:
        y = state(y)
    return y


def _step(a, c, x, m, j):
    for _ in range(j):
        x = (a * x + c) % m
    return x


def test_lab07_passes_the_written_out_answer():
    assert lab07.check_index(_index)


def test_lab07_rejects_values_that_change_when_asked_again():
    with pytest.raises(LabCheckError, match=r"lcg_index: for n = 2 the values are not a permutation of 0..1"):
        lab07.check_index(_right_for(1))


def test_lab07_rejects_shards_that_do_not_partition():
    # right for the graded values and the permutation, then every entry of a shard reads 0
    with pytest.raises(LabCheckError, match=r"lcg_index: for n = 2 the 2 shards overlap or leave gaps"):
        lab07.check_index(_right_for(2))


def test_reference_passes():
    assert lab.check_index(reference)


@pytest.mark.parametrize("mutant, kind", [
    (off_by_one, "off-by-one"), (modulus_above_n, "wrong modulus"), (folds_instead_of_walking, "fold instead of a walk"),
    (walks_one_step, "one LCG step"), (ignores_x0, "ignores x0"), (naive_lcg_mod_n, "naive LCG"),
    (walks_once, "Hint: F(j) is the state"), (calls_perflab, "perflab's own LCGPermutation"),
])
def test_mutants_are_refused_by_kind(mutant, kind):
    with pytest.raises(LabCheckError, match="lcg_index") as e:
        lab.check_index(mutant)
    assert kind in str(e.value)


def test_lab07_check_passes_the_solution_and_rejects_wrong_answers(capsys):
    from perflab.dataloading import lab07
    from perflab.grading.checks import LabCheckError

    assert lab07.check_index(_solution)

    def stub(**_):
        raise NotImplementedError

    assert not lab07.check_index(stub) and "not done yet" in capsys.readouterr().out
    with pytest.raises(LabCheckError):
        lab07.check_index(lambda i, n, a, c, x0: i)  # a permutation, but not the LCG's
    with pytest.raises(LabCheckError):  # the LCG's state without cycle-walking: values ≥ n
        lab07.check_index(lambda i, n, a, c, x0: _step(a, c, x0, lab07.modulus(n), i))
