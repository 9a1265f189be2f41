"""Checks for labs/07_shuffle.ipynb: write the LCG permutation's random access `index(i)`.

Why this exercise and not the starvation model: a permutation can be graded exactly and in
milliseconds (is it a permutation? do shards partition it? is it the LCG's?), while a model of
waiting time is graded against a timing that another process on a shared machine can disturb.

The learner's `lcg_index(i, n, a, c, x0)` returns perm[i] for the permutation of
`perflab.pipeline.shuffle`: F(j) = state of x → (a·x + c) mod m after j steps from x0, m the
smallest power of two ≥ n (at least 4); perm[i] = F(i), walked with F until it is < n.
"""

from __future__ import annotations

from collections.abc import Callable

from perflab.core.grading import LabCheckError, grade
from perflab.pipeline.shuffle import LCGPermutation

CASES = [(1, 0), (2, 1), (5, 2), (8, 3), (13, 4), (64, 5), (100, 6), (129, 7)]


def modulus(n: int) -> int:
    """m: the smallest power of two ≥ n, at least 4."""
    return 1 << max(2, (n - 1).bit_length())


def _params(n: int, seed: int) -> dict:
    p = LCGPermutation(n, seed)
    return {"n": n, "a": p.a, "c": p.c, "x0": p.x0}


def check_index(student: Callable[..., int]) -> bool:
    """Grades `lcg_index`: the LCG's values first, then that it is a permutation and that shards partition it."""
    cases = []
    for n, seed in CASES:
        kw = _params(n, seed)
        ref = LCGPermutation(n, seed)
        cases += [({"i": i, **kw}, ref[i]) for i in range(n)]
    if not grade("lcg_index", student, cases,
                 hint="F(j) is the state after j steps of x → (a·x + c) mod m from x0; walk: while y ≥ n, y = F(y)"):
        return False
    for n, seed in CASES:
        kw = _params(n, seed)
        values = [student(i=i, **kw) for i in range(n)]
        if sorted(values) != list(range(n)):
            raise LabCheckError(f"lcg_index: for n = {n} the values are not a permutation of 0..{n - 1}")
        for world in (2, 3):
            shards = [[student(i=i, **kw) for i in range(r, n, world)] for r in range(world)]
            if sorted(sum(shards, [])) != list(range(n)):
                raise LabCheckError(f"lcg_index: for n = {n} the {world} shards overlap or leave gaps")
    print("✓ lcg_index: a permutation for every n tried, and shards of 2 and 3 partition it")
    return True


def index_or_none(student: Callable[..., int], **kw):
    """The learner's answer, or None while the function is still a stub."""
    try:
        return student(**kw)
    except NotImplementedError:
        return None
