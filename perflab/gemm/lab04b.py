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


def evaluate(configs: list[dict[str, Any]], problem: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Compile each config for sm_90 and return its grades: spills, occupancy, utilization, ..."""
    from perflab.gemm import compiled

    p = {**PROBLEM, **(problem or {})}
    cfgs = [_config(c) for c in configs]
    results = compiled.compile_many(cfgs, p["dtype"], TARGET, shape=(p["m"], p["n"], p["k"]), gpu=p["gpu"],
                                    verbose=True)
    out = []
    for c, r in zip(cfgs, results, strict=True):
        row: dict[str, Any] = {"config": c.label(), "registers": r.registers, "spill_bytes": r.spill_bytes,
                               "shared_bytes": r.shared_bytes, "tensor_cores": r.tensor_core_kind,
                               "cannot_run": r.cannot_run, "tile_area": c.block_m * c.block_n, "_config": c}
        if r.occ is not None:
            w = compiled.waves(r, p["m"], p["n"], p["k"])
            row.update(blocks_per_sm=r.occ.blocks_per_sm, occupancy=r.occ.occupancy, limited_by=r.occ.limited_by,
                       tiles=w.tiles, waves=w.waves, wave_efficiency=w.wave_utilization,
                       tile_efficiency=w.tile_utilization, utilization=w.utilization)
        out.append(row)
    return out


def _eligible(row: dict[str, Any]) -> bool:
    return (not row["cannot_run"] and row["spill_bytes"] == 0 and row["tile_area"] >= MIN_TILE_AREA
            and row["tensor_cores"] == "wgmma")


def best_of_search(problem: dict[str, Any] | None = None) -> dict[str, Any]:
    """The search's best: the highest useful share among configs that pass the hard rules (fit the
    SM, no spills, tile ≥ 128×128, wgmma); occupancy only breaks ties, for the table."""
    rows = [r for r in evaluate(SEARCH, problem) if _eligible(r)]
    if not rows:  # pragma: no cover - the search is chosen so that some pass
        raise LabCheckError("no configuration of the search passes the rules: the lab's search needs mending")
    return max(rows, key=lambda r: (round(r["utilization"], 6), r["occupancy"]))


def grade_config(config: dict[str, Any], problem: dict[str, Any] | None = None) -> dict[str, Any]:
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
    if mine["cannot_run"]:
        raise LabCheckError(f"compiled, but it does not fit an SM of {p['gpu']}: {mine['cannot_run']}")
    if mine["spill_bytes"]:
        raise LabCheckError(
            f"{mine['config']} spills {nbytes(mine['spill_bytes'])} per thread to local memory ({mine['registers']} "
            f"registers, the most a thread may have is 255): its fp32 accumulator, {c.block_m}×{c.block_n} values "
            f"over {c.num_warps * 32} threads, is {c.block_m * c.block_n // (c.num_warps * 32)} registers a thread "
            "before anything else. Hint: more warps, or a smaller tile")
    if mine["tensor_cores"] != "wgmma":
        raise LabCheckError(f"{mine['config']} uses {mine['tensor_cores'] or 'no'} Tensor Core instructions, not "
                            "Hopper's wgmma, whose instructions work on 64-row slices (m64nNk16 in the PTX): with fewer "
                            "rows Triton falls back to Ampere's mma.sync. Hint: BLOCK_M of 64 or more")
    best = best_of_search(p)
    if mine["utilization"] < best["utilization"] - UTILIZATION_SLACK:
        raise LabCheckError(
            f"{mine['config']} wastes part of a wave: useful share {percent(mine['utilization'])} ({mine['tiles']} "
            f"tiles in {mine['waves']} wave(s): waves {percent(mine['wave_efficiency'])} × tiles "
            f"{percent(mine['tile_efficiency'])}) against {percent(best['utilization'])} for {best['config']}. Hint: "
            f"count the tiles of {p['m']}×{p['n']} for your tile and the slots of a wave (SMs × blocks per SM: "
            f"{mine['blocks_per_sm']} for yours)")
    return {"mine": mine, "best": best}


def compare_table(result: dict[str, Any]):
    """The learner's config beside the search's best, as a table of readable strings."""
    import pandas as pd

    from perflab.core.readout import nbytes, percent

    rows = {}
    for name in ("mine", "best"):
        r = result[name]
        rows["your config" if name == "mine" else "best of the search"] = {
            "config": r["config"], "registers": str(r["registers"]), "spills": nbytes(r["spill_bytes"]),
            "shared memory": nbytes(r["shared_bytes"]), "blocks/SM": str(r["blocks_per_sm"]),
            "occupancy": percent(r["occupancy"]), "limited by": r["limited_by"],
            "tiles / waves": f"{r['tiles']} / {r['waves']}", "useful share": percent(r["utilization"])}
    return pd.DataFrame(rows)


def check_config_choice(student: Callable[..., dict[str, Any]]) -> bool:
    """The lab's check: call `student(**PROBLEM)`, grade it, print what it reached beside the best."""
    got = attempt("pick_config", student, what=str(PROBLEM), **PROBLEM)
    if got is NOT_DONE:
        return False
    if not isinstance(got, dict):
        raise LabCheckError(f"pick_config should return a dict with {', '.join(KEYS)}, not {type(got).__name__}")
    res = grade_config(got)
    record("pick_config", True)
    mine = res["mine"]
    print(f"✓ pick_config: {mine['config']} fits the SM, does not spill and wastes no wave (useful share within "
          f"{UTILIZATION_SLACK:.0%} of the search's best). Its occupancy, {mine['occupancy']:.1%} "
          f"({mine['blocks_per_sm']} block(s)/SM, limited by {mine['limited_by']}), is a diagnostic, not a grade: "
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
