"""A permutation of N items from a full-period linear congruential generator, in O(1) memory.

The generator is x_{j+1} = (a·x_j + c) mod m with m = 2^k the smallest power of two ≥ N (at least 4).
Hull–Dobell: with a power-of-two modulus the period is the full m exactly when c is odd and
a ≡ 1 (mod 4). Then F(j) = x_j, the state after j steps from x_0 (derived from the RNG seed), is a bijection of
[0, m). F has a closed form, F(j) = a^j·x_0 + c·(a^j − 1)/(a − 1) mod m, computed in O(log m)
by squaring the affine map (jump-ahead), so `perm[i]` needs nothing else.

For N that is not a power of two, cycle-walking: perm[i] = F(i), and while the value is ≥ N apply
F again. Walking a bijection until it lands back in [0, N) gives a bijection of [0, N); since
m < 2N, fewer than half the values walk, and the expected walk is under two steps.

The whole state of an iterator is one integer (its position), shards are positions
r, r + W, r + 2W, … (disjoint, and together everything), and a DataLoader worker inside a rank
takes the shard `rank·workers + worker` of `world·workers`.

What it gives up: an LCG's outputs are far from a uniformly random permutation. The lowest bit of
x_j alternates (the low k bits of an LCG modulo 2^k have period 2^k), so consecutive entries
almost always have opposite parity; `parity_alternation` measures it (≈ 0.5 for a random shuffle).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from perflab.core.errors import InputError

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def hull_dobell_ok(a: int, c: int, m: int) -> bool:
    """True when x → (a·x + c) mod m has full period m, for m a power of two ≥ 4:
    c odd and a ≡ 1 (mod 4) (Hull and Dobell, 1962)."""
    if m < 4 or m & (m - 1):
        raise InputError(f"this check is for a power-of-two modulus ≥ 4, got {m}")
    return c % 2 == 1 and a % 4 == 1


@dataclass(frozen=True)
class LCGPermutation:
    """perm[i] for i in [0, n): random access, iteration, shards; a few integers of state.

    >>> p = LCGPermutation(10, seed=0)
    >>> sorted(p[i] for i in range(10)) == list(range(10))
    True
    """

    n: int
    seed: int = 0

    def __post_init__(self):
        if not isinstance(self.n, int) or self.n < 1:
            raise InputError(f"a permutation needs n ≥ 1 items, got {self.n!r}")
        if self.n > 1 << 62:
            raise InputError(f"n = {self.n} is larger than this permutation supports (2^62)")

    # the generator's constants, derived from the RNG seed argument
    @property
    def bits(self) -> int:
        return max(2, (self.n - 1).bit_length())

    @property
    def m(self) -> int:
        return 1 << self.bits

    @property
    def a(self) -> int:
        a = ((_splitmix64(self.seed * 3 + 1) & (self.m - 1)) & ~3) | 1  # a ≡ 1 (mod 4)
        return a if a != 1 or self.m < 8 else 5  # a = 1 would only add c: no mixing at all

    @property
    def c(self) -> int:
        return (_splitmix64(self.seed * 3 + 2) & (self.m - 1)) | 1  # odd

    @property
    def x0(self) -> int:
        return _splitmix64(self.seed * 3 + 3) & (self.m - 1)

    def __len__(self) -> int:
        return self.n

    def state_at(self, j: int) -> int:
        """F(j) = x_j: the generator's state after j steps from x_0, in O(log m) (jump-ahead)."""
        m1 = self.m - 1
        acc_a, acc_c = 1, 0
        pa, pc = self.a, self.c
        while j:
            if j & 1:
                acc_a, acc_c = (acc_a * pa) & m1, (acc_c * pa + pc) & m1
            pa, pc = (pa * pa) & m1, (pc * pa + pc) & m1
            j >>= 1
        return (acc_a * self.x0 + acc_c) & m1

    def index(self, i: int) -> int:
        """perm[i] without generating the rest (cycle-walking F until the value is < n)."""
        if not 0 <= i < self.n:
            raise InputError(f"index {i} is outside the permutation's 0..{self.n - 1}")
        y = self.state_at(i)
        while y >= self.n:
            y = self.state_at(y)
        return y

    __getitem__ = index

    def iter_from(self, start: int = 0, step: int = 1) -> Iterator[int]:
        """perm[start], perm[start + step], …: resume anywhere from one integer."""
        for i in range(start, self.n, step):
            yield self.index(i)

    def __iter__(self) -> Iterator[int]:
        return self.iter_from(0)

    def shard(self, rank: int, world: int) -> Iterator[int]:
        """Rank `rank` of `world`'s share: positions rank, rank + world, … (disjoint, and together all)."""
        if world < 1 or not 0 <= rank < world:
            raise InputError(f"shard {rank}/{world}: need 0 ≤ rank < world")
        return self.iter_from(rank, world)

    def block(self, start: int, count: int):
        """perm[start : start + count] as a numpy int64 array, vectorised (for whole-permutation runs)."""
        import numpy as np

        stop = min(self.n, start + count)
        j = np.arange(start, stop, dtype=np.uint64)
        y = self._states(j)
        walk = y >= np.uint64(self.n)
        while walk.any():
            y[walk] = self._states(y[walk])
            walk = y >= np.uint64(self.n)
        return y.astype(np.int64)

    def blocks(self, block: int = 1 << 16):
        """The whole permutation in order, as numpy arrays of `block` entries (O(block) memory).

        Consecutive states come from one jump and a precomputed table: x_{s+k} = A_k·x_s + C_k,
        with A_k = a^k and C_k = c·(a^k − 1)/(a − 1) mod m; only the walked values need a jump each.
        """
        import numpy as np

        m1 = np.uint64(self.m - 1)
        k = min(block, self.n)
        A = np.ones(1, dtype=np.uint64)
        C = np.zeros(1, dtype=np.uint64)
        ah, ch = np.uint64(self.a), np.uint64(self.c)  # the map of h = len(A) steps
        with np.errstate(over="ignore"):
            while len(A) < k:  # doubling: F_{h+j} = F_j ∘ F_h, so A_{h+j} = A_j·A_h, C_{h+j} = A_j·C_h + C_j
                A, C = np.concatenate([A, (A * ah) & m1]), np.concatenate([C, (A * ch + C) & m1])
                ah, ch = (ah * ah) & m1, (ah * ch + ch) & m1
        A, C = A[:k], C[:k]
        n = np.uint64(self.n)
        with np.errstate(over="ignore"):
            for start in range(0, self.n, k):
                cnt = min(k, self.n - start)
                y = (A[:cnt] * np.uint64(self.state_at(start)) + C[:cnt]) & m1
                walk = y >= n
                while walk.any():
                    y[walk] = self._states(y[walk])
                    walk = y >= n
                yield y.astype(np.int64)

    def _states(self, j):
        import numpy as np

        m1 = np.uint64(self.m - 1)
        acc_a = np.ones_like(j)
        acc_c = np.zeros_like(j)
        pa, pc = self.a, self.c
        jj = j.copy()
        with np.errstate(over="ignore"):
            for _ in range(self.bits):
                bit = (jj & np.uint64(1)).astype(bool)
                ua, uc = np.uint64(pa), np.uint64(pc)
                acc_a = np.where(bit, (acc_a * ua) & m1, acc_a)
                acc_c = np.where(bit, (acc_c * ua + uc) & m1, acc_c)
                pa, pc = (pa * pa) & (self.m - 1), (pc * pa + pc) & (self.m - 1)
                jj >>= np.uint64(1)
            return (acc_a * np.uint64(self.x0) + acc_c) & m1


def parse_shard(text: str) -> tuple[int, int]:
    """'R/W' → (rank, world)."""
    try:
        r, w = (int(t) for t in text.split("/"))
    except ValueError:
        raise InputError(f"--shard wants RANK/WORLD like 0/4, got {text!r}") from None
    if w < 1 or not 0 <= r < w:
        raise InputError(f"--shard {text}: need 0 ≤ RANK < WORLD")
    return r, w


def worker_shard(rank: int, world: int, worker: int, workers: int) -> tuple[int, int]:
    """The shard a DataLoader worker reads: rank·workers + worker of world·workers."""
    return rank * workers + worker, world * workers


def parity_alternation(values) -> float:
    """Share of consecutive pairs with opposite parity: ≈ 0.5 for a uniform shuffle, ≈ 1 for an LCG."""
    import numpy as np

    v = np.asarray(values, dtype=np.int64)
    if len(v) < 2:
        return float("nan")
    return float(np.mean((v[1:] & 1) != (v[:-1] & 1)))


def measure_whole(kind: str, n: int, seed: int = 0, block: int = 1 << 16) -> dict:
    """Generate a whole permutation of n one way and report seconds and peak bytes (tracemalloc).

    kind: 'lcg' (blocks of `block`, consumed and dropped), 'randperm' (torch.randperm, int64),
    'list' (Python list(range(n)) + random.shuffle). tracemalloc sees numpy's and Python's
    allocations; torch's are seen through the int64 tensor it returns (8·n bytes), added by hand.
    """
    import random
    import time
    import tracemalloc

    if kind not in ("lcg", "randperm", "list"):
        raise InputError(f"kind must be lcg, randperm or list, got {kind!r}")
    if kind == "randperm":
        import torch  # imported before the clock starts
    tracemalloc.start()
    t0 = time.perf_counter()
    extra = 0
    checksum = 0
    try:
        if kind == "lcg":
            for b in LCGPermutation(n, seed).blocks(block):
                checksum += int(b.sum())
        elif kind == "randperm":
            import torch  # imported above, before the clock started: here a dict look-up

            g = torch.Generator().manual_seed(seed)
            t = torch.randperm(n, generator=g)
            extra = t.numel() * t.element_size()
            checksum = int(t.sum())
            del t
        else:
            lst = list(range(n))
            random.Random(seed).shuffle(lst)
            checksum = sum(lst)
            del lst
        seconds = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    if checksum != n * (n - 1) // 2:
        raise AssertionError(f"{kind}: the generated values are not a permutation of 0..{n - 1}")
    return {"kind": kind, "n": n, "seconds": seconds, "peak_bytes": int(peak + extra)}


@dataclass(frozen=True)
class ShuffleCosts:
    """`measure_whole` for each method and length (lesson 07, section 8): seconds and peak bytes."""

    records: tuple[dict, ...]  # {"kind", "n", "seconds", "peak_bytes"}, as measure_whole returns them
    skipped: tuple[str, ...] = ()  # what was left out, and why

    def table(self):
        import pandas as pd

        from perflab.core.readout import num, seconds

        return pd.DataFrame([{"method": r["kind"], "N": f"{r['n']:.0e}", "time": seconds(r["seconds"], 2),
                              "peak memory": f"{num(r['peak_bytes'] / 1e6, 2)} MB"} for r in self.records])


LIST_LIMIT = 10**5  # a shuffled Python list of 1e5 ints already takes most of a second on a 2-core CPU
LIST_LIMIT_BIG = 10**7  # with big=True; 1e8 ints in a list would take about 4 GB (40 bytes each) and minutes


def measure_costs(sizes, *, big: bool = False, progress: bool = True) -> ShuffleCosts:
    """Time a whole permutation of each length in `sizes` three ways (LCG blocks, torch.randperm, a
    shuffled Python list); the list only up to LIST_LIMIT (LIST_LIMIT_BIG when `big`)."""
    limit = LIST_LIMIT_BIG if big else LIST_LIMIT
    out, skipped = [], []
    for n in sizes:
        for kind in ("lcg", "randperm", "list"):
            if kind == "list" and n > limit:
                skipped.append(f"list at N = {n:.0e} (over {limit:.0e}: big_shuffle=True goes further)")
                continue
            if progress:
                print(f"shuffling {n:.0e} items with {kind}…", flush=True)
            out.append(measure_whole(kind, n))
    return ShuffleCosts(tuple(out), tuple(skipped))


@dataclass(frozen=True)
class ParityCheck:
    """How often consecutive entries have opposite parity: the LCG's against a uniform shuffle's."""

    n: int
    lcg: float
    uniform: float

    def table(self):
        import pandas as pd

        from perflab.core.readout import percent

        return pd.DataFrame([{"shuffle": "LCG", "consecutive pairs of opposite parity": percent(self.lcg, 3)},
                             {"shuffle": "uniform (numpy)", "consecutive pairs of opposite parity": percent(self.uniform, 3)}])


def parity_check(n: int, seed: int = 0) -> ParityCheck:
    """`parity_alternation` over the first `n` entries of an LCG permutation and of numpy's uniform one."""
    import numpy as np

    return ParityCheck(n, parity_alternation(LCGPermutation(n, seed).block(0, n)),
                       parity_alternation(np.random.default_rng(seed).permutation(n)))
