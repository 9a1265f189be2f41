"""A learner's hidden regressions: k of the pool, drawn by a random seed made of their user name and the course's salt.

    >>> d = draw_for("ada")                # k = 3 from the whole pool, stable for "ada"
    >>> d                                   # Draw(k=3, token='…'): the names are not shown
    >>> d.step()                            # the learner's step, regressions on (perflab.hunt.step.HuntStep)
    >>> teacher_view(["ada", "bob"])       # the teacher sees each learner's draw

The random seed is sha256(user, salt), as lesson 09's shuffles (`perflab.grading.checks.shuffled_order`).
The pool is shuffled once by that random seed; the draw is the first k members of that order that this
machine can host (their measured cost reaches `perflab.hunt.pool.KEEP_SHARE`, when costs are
given) and that do not set a knob an earlier one set. A regression that costs nothing here is thus
redrawn: the next in the learner's order takes its place.

A teacher sets k, the pool and the salt with PERFLAB_HUNT_K, PERFLAB_HUNT_POOL ('gc,loader,…') and
PERFLAB_HUNT_SALT (a class's own salt makes its draws its own), or with `perflab hunt`'s options.
The draw is kept as a token (its names XOR-ed with a key from the random seed), so reading a learner's
causes takes deliberate digging, not a glance at a variable.
"""

from __future__ import annotations

import base64
import hashlib
import os
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON
from perflab.hunt.pool import NAMES, parse_pool, regression

SALT = "perflab-14-regression-hunt"
DEFAULT_K = 3


def salt() -> str:
    return os.environ.get("PERFLAB_HUNT_SALT") or SALT


def default_k() -> int:
    text = os.environ.get("PERFLAB_HUNT_K")
    if not text:
        return DEFAULT_K
    try:
        k = int(text)
    except ValueError:
        raise InputError(f"PERFLAB_HUNT_K={text!r} is not a whole number: set it to how many regressions to draw") from None
    if k < 1:
        raise InputError(f"PERFLAB_HUNT_K={k}: draw at least one regression")
    return k


def default_pool() -> tuple[str, ...]:
    return parse_pool(os.environ.get("PERFLAB_HUNT_POOL"))


def lesson_pool(smoke: bool = False) -> tuple[str, ...]:
    """The pool lesson 14 and its lab draw from: the default pool, less the per-step full collection in
    smoke mode (a full collection costs most of a second a step here: too slow for a smoke run)."""
    pool = default_pool()
    return tuple(n for n in pool if n != "gc") if smoke else pool


def max_drawable(pool: Sequence[str]) -> int:
    """The most regressions one draw can hold from `pool`: members that conflict (set the same knob)
    are never drawn together."""
    import itertools

    names = [regression(p).name for p in pool]
    for size in range(len(names), 0, -1):
        for combo in itertools.combinations(names, size):
            if not any(a in regression(b).conflicts or b in regression(a).conflicts
                       for a, b in itertools.combinations(combo, 2)):
                return size
    return 0


def candidate_order(user: str | None = None, pool: Sequence[str] | str | None = None, *,
                    salt_: str | None = None) -> tuple[str, ...]:
    """The order in which `draw_for` considers the pool for this learner (it skips members that
    conflict with one already drawn, or that cost too little on the learner's machine)."""
    names = default_pool() if pool is None else (parse_pool(pool) if isinstance(pool, str) else
                                                 tuple(regression(p).name for p in pool))
    order = list(names)
    random.Random(_seed(learner_name(user), salt_ or salt())).shuffle(order)
    return tuple(order)


def learner_name(user: str | None = None) -> str:
    if user:
        return str(user)
    from perflab.grading.checks import learner

    return os.environ.get("PERFLAB_LEARNER") or learner()


def _seed(user: str, salt_: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{user}\x00{salt_}".encode()).digest()[:8], "big")


def _key(seed: int, n: int) -> bytes:
    out = b""
    i = 0
    while len(out) < n:
        out += hashlib.sha256(":".join((str(seed), str(i))).encode()).digest()
        i += 1
    return out[:n]


@dataclass(frozen=True)
class Draw:
    """A learner's k regressions, kept as a token."""

    user: str
    k: int
    token: str
    seed: int

    def __repr__(self) -> str:
        return f"Draw(user={self.user!r}, k={self.k}, token={self.token!r})"

    def _names(self) -> tuple[str, ...]:
        raw = base64.urlsafe_b64decode(self.token.encode())
        text = bytes(a ^ b for a, b in zip(raw, _key(self.seed, len(raw)))).decode()
        return tuple(t for t in text.split(",") if t)

    def step(self, fixes: Iterable[str] = (), sizes=None):
        """This draw's step, with `fixes` applied (`perflab.hunt.step.HuntStep`)."""
        from perflab.hunt.step import HuntStep

        return HuntStep(self._names(), fixes, sizes)


def _encode(names: Sequence[str], seed: int) -> str:
    raw = ",".join(names).encode()
    return base64.urlsafe_b64encode(bytes(a ^ b for a, b in zip(raw, _key(seed, len(raw))))).decode()


def draw_for(user: str | None = None, k: int | None = None, pool: Sequence[str] | str | None = None, *,
             costs: Mapping[str, Any] | Callable[[str], Any] | None = None, salt_: str | None = None) -> Draw:
    """The learner's draw. `costs`: name → a measured cost (`perflab.hunt.step.Cost`, or its share as
    a number), or a function that measures one when asked (then only the members the draw reaches
    are measured); members whose cost is below KEEP_SHARE (or whose parity failed) are not drawn here."""
    who = learner_name(user)
    k = default_k() if k is None else int(k)
    if k < 1:
        raise InputError(f"k={k}: draw at least one regression")
    names = default_pool() if pool is None else (parse_pool(pool) if isinstance(pool, str) else
                                                 tuple(regression(p).name for p in pool))
    if k > max_drawable(names):
        raise InputError(f"k={k}: a draw from this pool holds at most {max_drawable(names)} regressions "
                         f"({len(names)} in the pool, some of which set the same knob)")
    seed = _seed(who, salt_ or salt())
    order = list(candidate_order(who, names, salt_=salt_))
    picked: list[str] = []
    for n in order:
        if len(picked) == k:
            break
        if any(n in regression(p).conflicts or p in regression(n).conflicts for p in picked):
            continue
        if costs is not None and not _kept(costs(n) if callable(costs) else costs.get(n)):
            continue
        picked.append(n)
    if not picked:
        raise InputError("no regression of the pool costs a clear share of the step on this machine: "
                         "nothing to draw (measure the costs again, or widen the pool)")
    return Draw(who, len(picked), _encode(picked, seed), seed)


def _kept(cost: Any) -> bool:
    from perflab.hunt.pool import KEEP_SHARE

    if cost is None:
        return False
    if isinstance(cost, int | float):
        return cost >= KEEP_SHARE
    if isinstance(cost, Mapping):
        return bool(cost.get("kept", cost.get("share", 0.0) >= KEEP_SHARE))
    return bool(getattr(cost, "kept", False))


def reveal_draw(d: Draw) -> tuple[str, ...]:
    """The draw's regression names (for the teacher and the grader)."""
    return d._names()


def teacher_view(users: Iterable[str], k: int | None = None, pool: Sequence[str] | str | None = None, *,
                 costs: Mapping[str, Any] | None = None, salt_: str | None = None) -> list[JSON]:
    """One row per learner: their draw's regressions, categories and fixes, as `perflab hunt --json`
    prints them."""
    rows = []
    for u in users:
        d = draw_for(u, k, pool, costs=costs, salt_=salt_)
        names = reveal_draw(d)
        rows.append({"learner": u, "k": d.k, "regressions": ",".join(names),
                     "categories": ",".join(regression(n).category for n in names),
                     "fixes": ",".join(regression(n).fix for n in names),
                     "order": ",".join(candidate_order(u, pool, salt_=salt_))})
    return rows


__all__ = ["Draw", "draw_for", "reveal_draw", "teacher_view", "lesson_pool", "candidate_order", "max_drawable", "NAMES",
           "SALT", "DEFAULT_K"]
