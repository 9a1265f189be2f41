"""Lab 07: the reference `lcg_index` passes; each plausible wrong one is refused with a hint naming its kind."""

import pytest

from perflab.core import grading
from perflab.core.grading import LabCheckError
from perflab.dataloading import lab07 as lab


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
    from perflab.dataloading.shuffle import LCGPermutation

    return LCGPermutation(n, 0)[i]


@pytest.fixture(autouse=True)
def _fresh():
    grading.reset()


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
