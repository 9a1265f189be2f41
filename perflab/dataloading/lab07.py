"""Checks for labs/07_shuffle.ipynb: write the LCG permutation's random access `index(i)`.

Why this exercise and not the starvation model: a permutation can be graded exactly and in
milliseconds (is it a permutation? do shards partition it? is it the LCG's?), while a model of
waiting time is graded against a timing that another process on a shared machine can disturb.

The learner's `lcg_index(i, n, a, c, x0)` returns perm[i] for the permutation of
`perflab.dataloading.shuffle`: F(j) = state of x → (a·x + c) mod m after j steps from x0, m the
smallest power of two ≥ n (at least 4); perm[i] = F(i), walked with F until it is < n.
"""

from __future__ import annotations

from collections.abc import Callable

from perflab.dataloading.shuffle import LCGPermutation
from perflab.grading.checks import NOT_PASSED, PASSED, LabCheckError, Verdict
from perflab.grading.guard import grade_known

CASES = [(1, 0), (2, 1), (5, 2), (8, 3), (13, 4), (64, 5), (100, 6), (129, 7)]


def modulus(n: int) -> int:
    """m: the smallest power of two ≥ n, at least 4."""
    return 1 << max(2, (n - 1).bit_length())


def _params(n: int, seed: int) -> dict:
    p = LCGPermutation(n, seed)
    return {"n": n, "a": p.a, "c": p.c, "x0": p.x0}


def _state(j: int, m: int, a: int, c: int, x0: int) -> int:
    """F(j), the state after j steps, by squaring the affine map (for the mistakes below)."""
    acc_a, acc_c, pa, pc = 1, 0, a, c
    while j:
        if j & 1:
            acc_a, acc_c = acc_a * pa % m, (acc_c * pa + pc) % m
        pa, pc = pa * pa % m, (pc * pa + pc) % m
        j >>= 1
    return (acc_a * x0 + acc_c) % m


def _walked(first, step):
    def f(i, n, a, c, x0):
        y = first(i, n, a, c, x0)
        for _ in range(4 * n + 8):
            if y < n:
                return y
            y = step(y, n, a, c, x0)
        return y
    return f


MISTAKES = [
    ("an off-by-one (perm[i] = F(i + 1))",
     _walked(lambda i, n, a, c, x0: _state(i + 1, modulus(n), a, c, x0),
             lambda y, n, a, c, x0: _state(y, modulus(n), a, c, x0)),
     "F(0) = x0: entry i is the state after i steps, not i + 1"),
    ("a wrong modulus (the power of two above n, not ≥ n)",
     _walked(lambda i, n, a, c, x0: _state(i, 1 << max(2, n.bit_length()), a, c, x0),
             lambda y, n, a, c, x0: _state(y, 1 << max(2, n.bit_length()), a, c, x0)),
     "m is the smallest power of two ≥ n (at least 4): for n = 8, m = 8"),
    ("a fold instead of a walk (F(i) mod n)",
     lambda i, n, a, c, x0: _state(i, modulus(n), a, c, x0) % n,
     "values ≥ n are walked on (y = F(y) until y < n); taking them mod n makes two entries equal"),
    ("walking by one LCG step instead of F(y)",
     _walked(lambda i, n, a, c, x0: _state(i, modulus(n), a, c, x0),
             lambda y, n, a, c, x0: (a * y + c) % modulus(n)),
     "cycle-walking applies the same map again: y = F(y), the state after y steps"),
    ("an answer that ignores x0 (starts from 0)",
     _walked(lambda i, n, a, c, x0: _state(i, modulus(n), a, c, 0),
             lambda y, n, a, c, x0: _state(y, modulus(n), a, c, 0)),
     "the walk starts at x0: F(0) = x0, not 0"),
    ("the naive LCG modulo n, (a·i + c) mod n",
     lambda i, n, a, c, x0: (a * i + c) % n,
     "an LCG modulo n has no full period unless n meets the Hull–Dobell conditions; use m, a power of two ≥ n"),
]


def check_index(student: Callable[..., int]) -> Verdict:
    """Grades `lcg_index`: the LCG's values first, then that it is a permutation and that shards partition it.

    The sizes include n = 1 (m = 4), powers of two (8, 64: no walk needed), sizes just above a power
    of two (5, 129: most states are walked) and others; the named MISTAKES each fail on one of them."""
    cases = []
    for n, seed in CASES:
        kw = _params(n, seed)
        ref = LCGPermutation(n, seed)
        cases += [({"i": i, **kw}, ref[i]) for i in range(n)]
    if not grade_known("lcg_index", student, cases, mistakes=MISTAKES, forbidden=[LCGPermutation],
                       hint="F(j) is the state after j steps of x → (a·x + c) mod m from x0; walk: while y ≥ n, y = F(y)"):
        return NOT_PASSED
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
    return PASSED


def index_or_none(student: Callable[..., int], **kw):
    """The learner's answer, or None while the function is still a stub."""
    try:
        return student(**kw)
    except NotImplementedError:
        return None


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
reference_index = _walked(lambda i, n, a, c, x0: _state(i, modulus(n), a, c, x0),
                          lambda y, n, a, c, x0: _state(y, modulus(n), a, c, x0))
LEARNER_ANSWERS = ("lcg_index",)
REFERENCES = {"lcg_index": reference_index}
FORBIDDEN = (LCGPermutation,)
HELPERS = ("index_or_none", "modulus")


def grading_inputs(rng) -> list[dict]:
    """perm[i] for sizes and random seeds drawn per learner: just above and below powers of two, and others."""
    out = []
    for _ in range(6):
        k = rng.randint(2, 14)
        n = max(1, rng.choice([2**k - 1, 2**k + 1, rng.randint(1, 2**k)]))
        kw = _params(n, rng.randint(0, 10**6))
        out += [{"i": rng.randrange(n), **kw} for _ in range(5)]
    return out


def judge(answers, rng) -> None:
    from perflab.grading.checks import hidden

    if check_index(answers["lcg_index"]):
        hidden("lcg_index on the grading inputs", answers["lcg_index"], reference_index, grading_inputs(rng))
