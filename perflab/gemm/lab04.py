"""Checks for labs/04_cliffs.ipynb: predict where a GEMM's throughput falls off a cliff.

The learner writes `tiles`, `waves` and `predict_cliffs`; each check compares them with
perflab.gemm.shapes on cases that include NVIDIA's worked example (A100, 108 SMs, 256×128 tiles,
M = 2304, K = 4096) and raises on a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from perflab.gemm import shapes
from perflab.grading.checks import Verdict, grade

# Exact multiples and one past them (the ragged edge), sizes smaller than a tile, non-square tiles
# with m and n on different sides of a multiple, and non-power-of-two sizes.
TILE_CASES = [(2304, 1536, 256, 128), (2304, 1537, 256, 128), (257, 256, 128, 128), (1, 1, 128, 128),
              (4096, 10922, 128, 256), (100, 300, 64, 64), (384, 200, 128, 64), (129, 128, 64, 128)]
# Exactly one wave, one tile over, fewer tiles than SMs, exact multiples, one past, non-power-of-two SM counts.
WAVE_CASES = [(108, 108), (117, 108), (1, 132), (264, 132), (265, 132), (1000, 80), (107, 108), (216, 108)]

_FORBIDDEN = (shapes.tile_count, shapes.wave_count, shapes.cliffs, shapes.ceil_div)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


TILE_MISTAKES = [
    ("you rounded down: a ragged last tile still needs a whole tile (⌈size / tile⌉)",
     lambda m, n, tile_m, tile_n: (m // tile_m) * (n // tile_n)),
    ("off by one: size // tile + 1 adds a tile even when the size is an exact multiple; use ⌈size / tile⌉",
     lambda m, n, tile_m, tile_n: (m // tile_m + 1) * (n // tile_n + 1)),
    ("m and n swapped against the tile's sides: m is covered by tile_m rows, n by tile_n columns",
     lambda m, n, tile_m, tile_n: _ceil(m, tile_n) * _ceil(n, tile_m)),
    ("that divides the areas (m·n / (tile_m·tile_n)): ragged edges need whole tiles in each dimension",
     lambda m, n, tile_m, tile_n: _ceil(m * n, tile_m * tile_n)),
]

WAVE_MISTAKES = [
    ("you rounded down: a partial wave (fewer tiles than SMs left) still takes a whole wave",
     lambda tiles, sms: tiles // sms),
    ("off by one: tiles // SMs + 1 adds a wave when the tiles fill the SMs exactly; use ⌈tiles / SMs⌉",
     lambda tiles, sms: tiles // sms + 1),
    ("a wave count is a whole number: round tiles / SMs up", lambda tiles, sms: tiles / sms),
]


def check_tiles(student: Callable[..., int]) -> Verdict:
    cases = [({"m": m, "n": n, "tile_m": tm, "tile_n": tn}, shapes.tile_count(m, n, tm, tn)) for m, n, tm, tn in TILE_CASES]
    return grade("tiles", student, cases, mistakes=TILE_MISTAKES, forbidden=_FORBIDDEN,
                 reference=lambda m, n, tile_m, tile_n: _ceil(m, tile_m) * _ceil(n, tile_n),
                 hint="each dimension needs ⌈size / tile⌉ tiles, even when the last is ragged")


def check_waves(student: Callable[..., int]) -> Verdict:
    cases = [({"tiles": t, "sms": s}, shapes.wave_count(t, s)) for t, s in WAVE_CASES]
    return grade("waves", student, cases, mistakes=WAVE_MISTAKES, forbidden=_FORBIDDEN,
                 reference=lambda tiles, sms: _ceil(tiles, sms), hint="a wave runs one tile per SM: ⌈tiles / SMs⌉")


def _cliffs_with(m, k, n_values, tile, sms, *, waves=_ceil, tiles=None, first=False, early=False):
    out, prev, prev_n = [], None, None
    for n in sorted(n_values):
        t = tiles(m, n, *tile) if tiles else _ceil(m, tile[0]) * _ceil(n, tile[1])
        w = waves(t, sms)
        if (prev is None and first) or (prev is not None and w > prev):
            out.append(prev_n if early and prev_n is not None else n)
        prev, prev_n = w, n
    return tuple(out)


CLIFF_MISTAKES = [
    ("one step early: a cliff is the first n of the new wave, not the last n of the old one",
     lambda m, k, n_values, tile, sms: _cliffs_with(m, k, n_values, tile, sms, early=True)),
    ("the first n is no cliff: there is no previous wave count to compare it with",
     lambda m, k, n_values, tile, sms: _cliffs_with(m, k, n_values, tile, sms, first=True)),
    ("you rounded the waves down: a partial wave still takes a whole wave (⌈tiles / SMs⌉)",
     lambda m, k, n_values, tile, sms: _cliffs_with(m, k, n_values, tile, sms, waves=lambda t, s: t // s)),
    ("you rounded the tiles down: a ragged last tile still needs a whole tile",
     lambda m, k, n_values, tile, sms: _cliffs_with(m, k, n_values, tile, sms,
                                                    tiles=lambda m, n, a, b: (m // a) * (n // b))),
    ("the tile's sides are (rows of m, columns of n): you used them the other way round",
     lambda m, k, n_values, tile, sms: _cliffs_with(m, k, n_values, (tile[1], tile[0]), sms)),
]


def cliff_cases() -> list[tuple[dict[str, Any], list[int]]]:
    """(inputs, expected cliffs): the guide's A100 example, an H100 case, and a small one."""
    out = []
    for m, k, n_values, tile, sms in [
        (2304, 4096, list(range(128, 4609, 1)), (256, 128), 108),  # NVIDIA's worked example
        (4096, 4096, list(range(128, 8193, 128)), (128, 256), 132),  # an H100 SXM
        (512, 512, list(range(16, 1025, 16)), (64, 64), 20),
        (300, 100, list(range(8, 601, 8)), (64, 32), 7),  # non-square tile, non-power-of-two sizes and SMs
    ]:
        out.append(({"m": m, "k": k, "n_values": n_values, "tile": tile, "sms": sms},
                    shapes.cliffs("n", n_values, {"m": m, "k": k}, sms=sms, tile=tile)))
    return out


def check_cliffs(student: Callable[..., Sequence[int]]) -> Verdict:
    cases = [(inp, tuple(want)) for inp, want in cliff_cases()]

    def answer(**kw):
        got = student(**kw)
        return got if got is None else tuple(int(v) for v in got)

    return grade("predict_cliffs", answer, cases, mistakes=CLIFF_MISTAKES, forbidden=_FORBIDDEN,
                 hint="walk the n values in order and keep each n whose wave count is higher than the previous n's")


def prediction_or_none(student: Callable[..., Any], **inputs) -> Any:
    """The learner's answer, or None while the function is still a stub (so the lab runs as shipped)."""
    try:
        return student(**inputs)
    except NotImplementedError:
        return None


def measured_drops(values: Sequence[int], tflops: Sequence[float], threshold: float = 0.10) -> list[int]:
    """The values where measured TFLOP/s falls by more than `threshold` (a fraction) from the previous point."""
    out = []
    pairs = list(zip(values, tflops, strict=True))
    for (_v0, t0), (v1, t1) in zip(pairs, pairs[1:], strict=False):
        if t0 > 0 and (t0 - t1) / t0 > threshold:
            out.append(int(v1))
    return out


def compare(predicted: Sequence[int] | None, measured: Sequence[int], step: int):
    """Each predicted cliff beside the nearest measured drop, and whether they are within one step."""
    import pandas as pd

    rows = []
    for p in predicted or []:
        near = min(measured, key=lambda m: abs(m - p)) if measured else None
        rows.append({"predicted cliff": p, "nearest measured drop": near,
                     "within one step": near is not None and abs(near - p) <= step})
    return pd.DataFrame(rows, columns=["predicted cliff", "nearest measured drop", "within one step"])


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
def reference_tiles(m: int, n: int, tile_m: int, tile_n: int) -> int:
    return shapes.tile_count(m, n, tile_m, tile_n)


def reference_waves(tiles: int, sms: int) -> int:
    return shapes.wave_count(tiles, sms)


def reference_cliffs(m: int, k: int, n_values: list[int], tile: tuple[int, int], sms: int) -> tuple[int, ...]:
    return tuple(shapes.cliffs("n", n_values, {"m": m, "k": k}, sms=sms, tile=tile))


LEARNER_ANSWERS = ("tiles", "waves", "predict_cliffs")
REFERENCES = {"tiles": reference_tiles, "waves": reference_waves, "predict_cliffs": reference_cliffs}
FORBIDDEN = _FORBIDDEN
HELPERS = ("prediction_or_none", "measured_drops", "compare", "cliff_cases")


def grading_inputs(rng) -> dict[str, list[dict]]:
    from perflab.grading.checks import draw_int

    tiles = [dict(m=draw_int(rng, 1, 20000), n=draw_int(rng, 1, 20000), tile_m=rng.choice([16, 32, 64, 128, 256]),
                  tile_n=rng.choice([16, 32, 64, 128, 256])) for _ in range(8)]
    waves = [dict(tiles=draw_int(rng, 1, 5000), sms=rng.choice([7, 20, 80, 108, 114, 132])) for _ in range(8)]
    waves.append(dict(tiles=132 * rng.randint(1, 9), sms=132))  # an exact fill
    cliffs = []
    for _ in range(2):
        step = rng.choice([8, 16, 64])
        top = step * rng.randint(20, 80)
        cliffs.append(dict(m=draw_int(rng, 64, 8192), k=draw_int(rng, 64, 8192), n_values=list(range(step, top + 1, step)),
                           tile=(rng.choice([64, 128, 256]), rng.choice([32, 64, 128])), sms=rng.choice([20, 108, 132])))
    return {"tiles": tiles, "waves": waves, "predict_cliffs": cliffs}


def judge(answers, rng) -> None:
    from perflab.grading.checks import hidden

    drawn = grading_inputs(rng)
    if check_tiles(answers["tiles"]):
        hidden("tiles on the grading inputs", answers["tiles"], reference_tiles, drawn["tiles"])
    if check_waves(answers["waves"]):
        hidden("waves on the grading inputs", answers["waves"], reference_waves, drawn["waves"])
    if check_cliffs(answers["predict_cliffs"]):
        student = answers["predict_cliffs"]
        hidden("predict_cliffs on the grading inputs", lambda **kw: tuple(int(v) for v in student(**kw)),
               reference_cliffs, drawn["predict_cliffs"])
