"""Checks for labs/04b_tile_config.ipynb: pick a Triton tile configuration for a GEMM on an H100.

The learner's `pick_config(m, n, k, gpu, dtype)` returns block sizes, warps and stages. The check
compiles it for sm_90 (no GPU needed), reads what the compiler made of it, and grades what can be
defended without running it:

1. it fits the SM: its shared memory and its registers let at least one block reside (refused, with
   the limit it breaks, otherwise);
2. no spills (registers that do not fit go to slow local memory);
3. it wastes no wave: its useful share of the GPU (tile and wave quantization, lesson 04) is within
   2 points of the best configuration of a small search.

Occupancy is reported, not graded. Tensor Core GEMMs hide memory latency with asynchronous copies
and pipeline stages rather than with many resident warps, and tuned Hopper kernels often run one
block per SM (V. Volkov, "Better performance at lower occupancy", GTC 2010): 128×128×64 with 8 warps
and 4 stages (1 block per SM, 2 full waves) is as defensible here as 3 stages (2 blocks per SM, 1
wave). Only a GPU's timing can rank such configs.

It also refuses what defeats the point: a block that is not a power of two, a tile under 128×128
outputs (it reads A and B more often per FLOP: with 64×64 tiles twice as often as with 128×128),
and Ampere-style `mma.sync` on a Hopper. Every refusal says what the choice lost and what to change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perflab.core.errors import InputError
from perflab.grading.checks import NOT_DONE, LabCheckError, attempt, record

PROBLEM = {"m": 3072, "n": 1408, "k": 4096, "gpu": "h100-sxm", "dtype": "fp16"}
TARGET = "sm_90"
MIN_TILE_AREA = 128 * 128
UTILIZATION_SLACK = 0.02

# The small search: tiles of at least 128×128 outputs, the usual K slices, warps and stages.
SEARCH = [
    dict(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3),
    dict(block_m=128, block_n=128, block_k=32, num_warps=8, num_stages=4),
    dict(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=4),
    dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3),
    dict(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3),
    dict(block_m=256, block_n=128, block_k=64, num_warps=8, num_stages=3),
]
KEYS = ("block_m", "block_n", "block_k", "num_warps", "num_stages")


def _config(d: dict[str, Any]):
    from perflab.gemm.triton_matmul import TileConfig

    missing = [k for k in KEYS if k not in d]
    if missing:
        raise LabCheckError(f"pick_config: your dict has no {', '.join(missing)}; return all of {', '.join(KEYS)}")
    try:
        return TileConfig(**{k: int(d[k]) for k in KEYS})
    except InputError as e:
        raise LabCheckError(f"pick_config: {e}") from None


@dataclass
class ConfigRow:
    """One configuration compiled for the lab's GEMM: what the compiler made of it and the useful share
    of the GPU it reaches (lesson 04's wave model). The occupancy and wave figures are None when it
    cannot run."""

    config: str  # its label, '128x128x64 w8 s3'
    registers: int  # per thread
    spill_bytes: int
    shared_bytes: int  # per block
    tensor_cores: str | None  # 'wgmma', 'mma' or None: the Tensor Core instructions in its PTX
    cannot_run: str | None  # the limit it breaks, and what to change
    tile_area: int  # BLOCK_M × BLOCK_N outputs
    blocks_per_sm: int | None = None
    occupancy: float | None = None  # resident warps / max warps
    limited_by: str | None = None
    tiles: int | None = None
    waves: int | None = None
    wave_efficiency: float | None = None
    tile_efficiency: float | None = None
    utilization: float | None = None  # the useful share: tile × wave efficiency
    tile_config: Any = None  # the perflab.gemm.triton_matmul.TileConfig


def evaluate(configs: list[dict[str, Any]], problem: dict[str, Any] | None = None) -> list[ConfigRow]:
    """Compile each config for sm_90 and return its grades: spills, occupancy, utilization, ..."""
    from perflab.gemm import compiled

    p = {**PROBLEM, **(problem or {})}
    cfgs = [_config(c) for c in configs]
    results = compiled.compile_many(cfgs, p["dtype"], TARGET, shape=(p["m"], p["n"], p["k"]), gpu=p["gpu"],
                                    verbose=True)
    out = []
    for c, r in zip(cfgs, results, strict=True):
        row = ConfigRow(c.label(), r.registers, r.spill_bytes, r.shared_bytes, r.tensor_core_kind, r.cannot_run,
                        c.block_m * c.block_n, tile_config=c)
        if r.occ is not None:
            w = compiled.waves(r, p["m"], p["n"], p["k"])
            row.blocks_per_sm, row.occupancy, row.limited_by = r.occ.blocks_per_sm, r.occ.occupancy, r.occ.limited_by
            row.tiles, row.waves, row.wave_efficiency = w.tiles, w.waves, w.wave_utilization
            row.tile_efficiency, row.utilization = w.tile_utilization, w.utilization
        out.append(row)
    return out


def _eligible(row: ConfigRow) -> bool:
    return (not row.cannot_run and row.spill_bytes == 0 and row.tile_area >= MIN_TILE_AREA
            and row.tensor_cores == "wgmma")


def best_of_search(problem: dict[str, Any] | None = None) -> ConfigRow:
    """The search's best: the highest useful share among configs that pass the hard rules (fit the
    SM, no spills, tile ≥ 128×128, wgmma); occupancy only breaks ties, for the table."""
    rows = [r for r in evaluate(SEARCH, problem) if _eligible(r)]
    if not rows:  # pragma: no cover - the search is chosen so that some pass
        raise LabCheckError("no configuration of the search passes the rules: the lab's search needs mending")
    return max(rows, key=lambda r: (round(r.utilization or 0.0, 6), r.occupancy or 0.0))


@dataclass
class ConfigGrade:
    """A configuration that passed, beside the search's best."""

    mine: ConfigRow
    best: ConfigRow

    def table(self):
        """The two side by side, as readable strings."""
        import pandas as pd

        from perflab.core.readout import nbytes, percent

        rows = {}
        for name, r in (("your config", self.mine), ("best of the search", self.best)):
            rows[name] = {
                "config": r.config, "registers": str(r.registers), "spills": nbytes(r.spill_bytes),
                "shared memory": nbytes(r.shared_bytes), "blocks/SM": str(r.blocks_per_sm),
                "occupancy": percent(r.occupancy or 0.0), "limited by": r.limited_by,
                "tiles / waves": f"{r.tiles} / {r.waves}", "useful share": percent(r.utilization or 0.0)}
        return pd.DataFrame(rows)


def grade_config(config: dict[str, Any], problem: dict[str, Any] | None = None) -> ConfigGrade:
    """Raise LabCheckError (what the choice lost, what to change) unless `config` fits the SM, does
    not spill, uses wgmma on a tile of at least 128×128 and wastes no wave against the search's
    best; return both rows when it passes. Occupancy is in the rows, as a diagnostic."""
    from perflab.core.readout import nbytes, percent
    from perflab.gemm import compiled

    p = {**PROBLEM, **(problem or {})}
    c = _config(config)
    try:
        compiled.check_config(c, p["dtype"], TARGET, p["gpu"])
    except InputError as e:
        raise LabCheckError(f"this config cannot run: {e}") from None
    if c.block_m * c.block_n < MIN_TILE_AREA:
        raise LabCheckError(
            f"a {c.block_m}×{c.block_n} tile is under 128×128 outputs: per k step it loads "
            f"{(c.block_m + c.block_n) / (c.block_m * c.block_n):.3g} elements of A and B per output, against "
            f"{256 / 16384:.3g} for 128×128, so the kernel reads A and B "
            f"{(c.block_m + c.block_n) / (c.block_m * c.block_n) / (256 / 16384):.3g}× as often. Hint: use at least 128×128")
    mine = evaluate([config], p)[0]
    if mine.cannot_run:
        raise LabCheckError(f"compiled, but it does not fit an SM of {p['gpu']}: {mine.cannot_run}")
    if mine.spill_bytes:
        raise LabCheckError(
            f"{mine.config} spills {nbytes(mine.spill_bytes)} per thread to local memory ({mine.registers} "
            f"registers, the most a thread may have is 255): its fp32 accumulator, {c.block_m}×{c.block_n} values "
            f"over {c.num_warps * 32} threads, is {c.block_m * c.block_n // (c.num_warps * 32)} registers a thread "
            "before anything else. Hint: more warps, or a smaller tile")
    if mine.tensor_cores != "wgmma":
        raise LabCheckError(f"{mine.config} uses {mine.tensor_cores or 'no'} Tensor Core instructions, not "
                            "Hopper's wgmma, whose instructions work on 64-row slices (m64nNk16 in the PTX): with fewer "
                            "rows Triton falls back to Ampere's mma.sync. Hint: BLOCK_M of 64 or more")
    best = best_of_search(p)
    mine_u, best_u = mine.utilization or 0.0, best.utilization or 0.0
    if mine_u < best_u - UTILIZATION_SLACK:
        raise LabCheckError(
            f"{mine.config} wastes part of a wave: useful share {percent(mine_u)} ({mine.tiles} "
            f"tiles in {mine.waves} wave(s): waves {percent(mine.wave_efficiency or 0.0)} × tiles "
            f"{percent(mine.tile_efficiency or 0.0)}) against {percent(best_u)} for {best.config}. Hint: "
            f"count the tiles of {p['m']}×{p['n']} for your tile and the slots of a wave (SMs × blocks per SM: "
            f"{mine.blocks_per_sm} for yours)")
    return ConfigGrade(mine, best)


def compare_table(result: ConfigGrade):
    """The learner's config beside the search's best, as a table of readable strings (`result.table()`)."""
    return result.table()


def check_config_choice(student: Callable[..., dict[str, Any]]) -> bool:
    """The lab's check: call `student(**PROBLEM)`, grade it, print what it reached beside the best."""
    got = attempt("pick_config", student, what=str(PROBLEM), **PROBLEM)
    if got is NOT_DONE:
        return False
    if not isinstance(got, dict):
        raise LabCheckError(f"pick_config should return a dict with {', '.join(KEYS)}, not {type(got).__name__}")
    res = grade_config(got)
    record("pick_config", True)
    mine = res.mine
    print(f"✓ pick_config: {mine.config} fits the SM, does not spill and wastes no wave (useful share within "
          f"{UTILIZATION_SLACK:.0%} of the search's best). Its occupancy, {mine.occupancy or 0.0:.1%} "
          f"({mine.blocks_per_sm} block(s)/SM, limited by {mine.limited_by}), is a diagnostic, not a grade: "
          "only a GPU's timing ranks configs that pass")
    try:
        from IPython.display import display

        display(compare_table(res))
    except ImportError:  # pragma: no cover
        print(compare_table(res))
    return True


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
LEARNER_ANSWERS = ("pick_config",)
REFERENCES = {"pick_config": best_of_search}
FORBIDDEN = (best_of_search, grade_config)
HELPERS = ("evaluate", "compare_table", "_config", "_eligible")


def judge(answers, rng) -> None:
    """The learner's choice for the lab's GEMM, graded here against the search's best."""
    check_config_choice(answers["pick_config"])
