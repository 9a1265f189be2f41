"""Tile and wave quantization: how a GPU cuts a GEMM into blocks and runs them in waves (lesson 04).

How a GPU runs C[m×n] = A[m×k] · B[k×n] (NVIDIA, "Matrix Multiplication Background User's Guide",
DU-09799-001, ch. 2–3, https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/):

* The output C is cut into tiles of tile_m × tile_n; each tile is one thread block, which steps
  through all of k. So there are  tiles = ⌈m / tile_m⌉ · ⌈n / tile_n⌉  blocks, each doing the
  same work, even the ragged ones at the edges (**tile quantization**).
* The GPU runs `sms × blocks_per_sm` blocks at once (a **wave**; A100: 108 SMs, one 256×128
  block per SM, so 108 tiles per wave). The blocks need  waves = ⌈tiles / wave_size⌉  rounds, and
  a last wave that is nearly empty costs almost as long as a full one (**wave quantization**).
* So the fraction of the machine doing useful work is
      utilization = (m · n) / (waves · wave_size · tile_m · tile_n)
                  = tile_utilization · wave_utilization, with
      tile_utilization = m·n / (tiles · tile_m · tile_n)   (useful share of the computed outputs)
      wave_utilization = tiles / (waves · wave_size)         (busy share of the SM slots)
  and a compute-bound GEMM is predicted to run at peak × utilization, its time a staircase in
  the number of waves.

Everything here is arithmetic: no torch, no device. `perflab.gemm.shapes` re-exports every name (the
lessons call them from there).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, to_json
from perflab.core.validate import positive_int

# Thread-block tile shapes (tile_m × tile_n) that cuBLAS kernels use; the guide's §2.3 lists
# 256×128, 128×256, 128×128, 256×64, 64×256, 128×64, 64×128 and 64×64 (from most to least efficient).
TILE_SHAPES: tuple[tuple[int, int], ...] = (
    (256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64), (64, 128), (64, 64),
)
# Blocks to try when fitting a CPU's steps: CPU BLAS kernels work on register blocks of a few
# vectors (16 fp32 values per AVX-512 register) inside cache blocks of a few hundred.
CPU_BLOCKS: tuple[tuple[int, int], ...] = (
    (8, 8), (16, 16), (32, 32), (64, 64), (128, 128), (16, 64), (64, 16), (32, 128), (128, 32),
)


def parse_tile(text: str | Sequence[int]) -> tuple[int, int]:
    """'256x128' (or '256×128', '256,128', (256, 128)) as (tile_m, tile_n)."""
    if isinstance(text, (tuple, list)):
        parts = list(text)
    else:
        parts = [p for p in re.split(r"\s*[x×X*,]\s*", str(text).strip()) if p]
    if len(parts) != 2:
        raise InputError(f"tile {text!r} should look like 256x128 (rows × columns of one output tile)")
    try:
        tm, tn = (int(p) for p in parts)
    except (TypeError, ValueError):
        raise InputError(f"tile {text!r} should be two whole numbers, e.g. 256x128") from None
    return positive_int("tile rows", tm), positive_int("tile columns", tn)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def tile_count(m: int, n: int, tile_m: int, tile_n: int) -> int:
    """Thread blocks (tiles) covering an m×n output: ⌈m/tile_m⌉ · ⌈n/tile_n⌉."""
    return ceil_div(positive_int("m", m), positive_int("tile rows", tile_m)) * \
        ceil_div(positive_int("n", n), positive_int("tile columns", tile_n))


def wave_count(tiles: int, sms: int, blocks_per_sm: int = 1) -> int:
    """Rounds needed to run `tiles` blocks on `sms` SMs holding `blocks_per_sm` each: ⌈tiles / (sms·blocks)⌉."""
    return ceil_div(positive_int("tiles", tiles), positive_int("sms", sms) * positive_int("blocks per SM", blocks_per_sm))


@dataclass(frozen=True)
class WavePrediction:
    """The tile/wave model of one GEMM. Fractions are 0..1; counts are whole numbers."""

    m: int
    n: int
    k: int
    tile_m: int
    tile_n: int
    sms: int
    blocks_per_sm: int
    tiles_m: int
    tiles_n: int
    tiles: int
    wave_size: int  # blocks running at once: sms × blocks_per_sm
    waves: int
    last_wave_tiles: int  # blocks in the last (tail) wave
    tile_utilization: float  # m·n / (tiles · tile_m · tile_n)
    wave_utilization: float  # tiles / (waves · wave_size)
    utilization: float  # the product: useful share of the machine
    arithmetic_intensity: float | None = None  # FLOPs per byte (with `itemsize`), None when not asked
    itemsize: int | None = None

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def as_dict(self) -> JSON:
        """The prediction and its FLOPs, for `perflab waves --json` and a lesson's table."""
        return {**to_json(self), "flops": self.flops}

    def describe(self) -> str:
        return (f"{self.m}×{self.n}×{self.k} with {self.tile_m}×{self.tile_n} tiles on {self.sms} SMs"
                f"{'' if self.blocks_per_sm == 1 else f' × {self.blocks_per_sm} blocks'}: "
                f"{self.tiles_m}·{self.tiles_n} = {self.tiles} tiles → {self.waves} wave(s) of {self.wave_size} "
                f"(last wave {self.last_wave_tiles}/{self.wave_size}); utilization {self.utilization:.1%} "
                f"(tiles {self.tile_utilization:.1%} × waves {self.wave_utilization:.1%})")


def wave_model(m: int, n: int, k: int = 1, *, sms: int, tile: str | Sequence[int] = (256, 128),
               blocks_per_sm: int = 1, itemsize: int | None = None) -> WavePrediction:
    """Tiles, waves and utilization of an m×k by k×n GEMM (see the module docstring)."""
    m, n, k = positive_int("m", m), positive_int("n", n), positive_int("k", k)
    sms = positive_int("sms", sms, maximum=100_000)
    tm, tn = parse_tile(tile)
    bps = positive_int("blocks per SM", blocks_per_sm, maximum=64)
    tiles_m, tiles_n = ceil_div(m, tm), ceil_div(n, tn)
    tiles = tiles_m * tiles_n
    wave_size = sms * bps
    waves = ceil_div(tiles, wave_size)
    tile_u = (m * n) / (tiles * tm * tn)
    wave_u = tiles / (waves * wave_size)
    ai = None
    if itemsize is not None:
        from perflab.core.roofline import matmul_intensity

        ai = matmul_intensity(m, n, k, itemsize)
    return WavePrediction(m, n, k, tm, tn, sms, bps, tiles_m, tiles_n, tiles, wave_size, waves,
                          tiles - (waves - 1) * wave_size, tile_u, wave_u, tile_u * wave_u, ai, itemsize)


def predicted_time_s(m: int, n: int, k: int, *, sms: int, tile=(256, 128), peak_tflops: float,
                     blocks_per_sm: int = 1, bandwidth_gbps: float | None = None, itemsize: int = 2) -> float:
    """Seconds the model predicts for one GEMM.

    Compute: every wave takes as long as one block's work at the per-slot share of the peak,
        t_compute = waves · (2 · tile_m · tile_n · k) / (peak / wave_size) = 2·m·n·k / (peak · utilization).
    Memory (when a bandwidth is given): the fewest bytes a GEMM moves, (mk + kn + mn) · itemsize,
    at that bandwidth. The prediction is the larger of the two (the roofline).
    """
    if not peak_tflops or peak_tflops <= 0:
        raise InputError("a predicted time needs a peak TFLOP/s > 0 (this device's peak is unknown: pass one)")
    w = wave_model(m, n, k, sms=sms, tile=tile, blocks_per_sm=blocks_per_sm)
    t = w.flops / (peak_tflops * 1e12 * w.utilization)
    if bandwidth_gbps:
        from perflab.core.roofline import matmul_bytes

        t = max(t, matmul_bytes(w.m, w.n, w.k, itemsize) / (bandwidth_gbps * 1e9))
    return t


def predicted_tflops(m: int, n: int, k: int, **kw) -> float:
    """TFLOP/s the model predicts: 2·m·n·k / `predicted_time_s`."""
    return 2 * m * n * k / predicted_time_s(m, n, k, **kw) / 1e12


DIMS = ("m", "n", "k")


def shape_along(dim: str, value: int, fixed: dict[str, int]) -> tuple[int, int, int]:
    """(m, n, k) with `dim` at `value` and the other two from `fixed`."""
    if dim not in DIMS:
        raise InputError(f"dimension {dim!r}: use m, n or k")
    s = {**fixed, dim: value}
    missing = [d for d in DIMS if d not in s]
    if missing:
        raise InputError(f"give the fixed sizes {', '.join(missing)} for a sweep over {dim}")
    return int(s["m"]), int(s["n"]), int(s["k"])


def staircase(dim: str, values: Iterable[int], fixed: dict[str, int], *, sms: int, tile=(256, 128),
              blocks_per_sm: int = 1, peak_tflops: float | None = None, bandwidth_gbps: float | None = None,
              itemsize: int = 2):
    """The model along one dimension: a DataFrame with m, n, k, tiles, waves, utilization per value,
    plus predicted_time_s and predicted_tflops when a peak is given."""
    import pandas as pd

    rows = []
    for v in values:
        m, n, k = shape_along(dim, int(v), fixed)
        w = wave_model(m, n, k, sms=sms, tile=tile, blocks_per_sm=blocks_per_sm)
        row = {"m": m, "n": n, "k": k, dim: int(v), "tiles": w.tiles, "waves": w.waves,
               "tile_utilization": w.tile_utilization, "wave_utilization": w.wave_utilization,
               "utilization": w.utilization}
        if peak_tflops:
            t = predicted_time_s(m, n, k, sms=sms, tile=tile, blocks_per_sm=blocks_per_sm, peak_tflops=peak_tflops,
                                 bandwidth_gbps=bandwidth_gbps, itemsize=itemsize)
            row.update(predicted_time_s=t, predicted_tflops=w.flops / t / 1e12)
        rows.append(row)
    return pd.DataFrame(rows)


def cliffs(dim: str, values: Iterable[int], fixed: dict[str, int], *, sms: int, tile=(256, 128),
           blocks_per_sm: int = 1) -> list[int]:
    """The values along `dim` where one more wave is needed (the first value of each new wave).

    Throughput drops there: the new wave starts almost empty.
    """
    out, prev = [], None
    for v in sorted(int(x) for x in values):
        m, n, k = shape_along(dim, v, fixed)
        w = wave_count(tile_count(m, n, *parse_tile(tile)), sms, blocks_per_sm)
        if prev is not None and w > prev:
            out.append(v)
        prev = w
    return out


def full_wave_sizes(dim: str, fixed: dict[str, int], *, sms: int, tile=(256, 128), blocks_per_sm: int = 1,
                    limit: int = 10**6) -> list[int]:
    """Sizes along `dim` (multiples of the tile) whose tile count is an exact multiple of the wave size."""
    tm, tn = parse_tile(tile)
    step = {"m": tm, "n": tn}.get(dim)
    if step is None:
        raise InputError("full waves are about the output's rows (m) or columns (n), not k")
    out = []
    v = step
    while v <= limit:
        m, n, k = shape_along(dim, v, fixed)
        if tile_count(m, n, tm, tn) % (sms * blocks_per_sm) == 0:
            out.append(v)
        v += step
    return out


# ---------------------------------------------------------------- the guide's worked example, and cliffs predicted


@dataclass(frozen=True)
class GuideExample:
    """NVIDIA's worked example of wave quantization (the guide's §3.2): n varies, m and k fixed, one
    tile shape, one block per SM, a GPU's SM count. Built from its published record
    (`perflab/gemm/data/published_shapes.json`, 'nvidia_wave_example')."""

    m: int
    k: int
    sms: int
    tile: tuple[int, int]
    description: str
    source: str

    @staticmethod
    def from_record(rec: dict) -> GuideExample:
        tm, tn = parse_tile(rec["tile"])
        return GuideExample(int(rec["m"]), int(rec["k"]), int(rec["sms"]), (tm, tn), str(rec["description"]),
                            str(rec["source"]))

    @property
    def fixed(self) -> dict[str, int]:
        return {"m": self.m, "k": self.k}

    def full_waves(self, count: int = 3) -> list[int]:
        """The first `count` values of n whose tile count fills whole waves."""
        tn = self.tile[1]
        return full_wave_sizes("n", self.fixed, sms=self.sms, tile=self.tile, limit=tn * self.sms * count)[:count]

    def cliffs(self, count: int = 3) -> list[int]:
        """The values of n (up to the `count`-th full wave) where one more wave is needed."""
        full = self.full_waves(count)
        return cliffs("n", range(self.tile[1], full[-1] + 1), self.fixed, sms=self.sms, tile=self.tile)

    @property
    def past(self) -> int:
        """n one whole column of tiles past the first full wave: the first cliff's wave at its fullest."""
        return self.cliffs()[0] + self.tile[1] - 1

    def text(self) -> str:
        return (f"{self.description}\nSource: {self.source}\nFull waves at n = {self.full_waves()}; one more wave "
                f"needed from n = {self.cliffs()}")

    def table(self):
        """The model at the values of n around the first two cliffs: tiles, waves, the last wave's tiles and the
        utilization."""
        import pandas as pd

        from perflab.core.readout import percent

        full, cl, tn = self.full_waves(), self.cliffs(), self.tile[1]
        rows = []
        for n in sorted({full[0] - tn, full[0], cl[0], cl[0] + tn - 1, full[1], cl[1]}):
            w = wave_model(self.m, n, self.k, sms=self.sms, tile=self.tile)
            rows.append({"m": w.m, "n": w.n, "k": w.k, "tiles": w.tiles, "waves": w.waves,
                         "tiles in the last wave": w.last_wave_tiles, "utilization": percent(w.utilization)})
        return pd.DataFrame(rows)


@dataclass(frozen=True)
class CliffPrediction:
    """Where the model puts the cliffs (the first value of each new wave) of a sweep along n, for several
    tiles, and of the guide's GPU sweep with 256×128 tiles (lesson 04, section 4)."""

    sms: int
    sweep: tuple[tuple[tuple[int, int], tuple[int, ...]], ...]  # (tile, cliffs) over this device's sweep
    guide_fixed: tuple[int, int]  # m, k of the guide's sweep
    guide_span: tuple[int, int]  # its first and last n
    guide: tuple[int, ...]  # its cliffs with 256×128 tiles

    @property
    def first_guide_cliff(self) -> float:
        return float(self.guide[0]) if self.guide else float("nan")

    def text(self) -> str:
        lines = [f"  model, {t[0]}×{t[1]} tiles on {self.sms} SMs: new waves start at n = "
                 + (str(list(c)) if c else "(none in this range)") for t, c in self.sweep]
        m, k = self.guide_fixed
        lines.append(f"  model, m = {m}, k = {k}, 256×128 tiles on {self.sms} SMs, n in {self.guide_span[0]}.."
                     f"{self.guide_span[1]}: new waves start at n = {list(self.guide)}")
        return "\n".join(lines)


def predict_cliffs(values: Iterable[int], fixed: dict[str, int], guide_values: Iterable[int],
                   guide_fixed: dict[str, int], *, sms: int,
                   tiles: Sequence[tuple[int, int]] = ((256, 128), (128, 256), (128, 128))) -> CliffPrediction:
    """The cliffs of a sweep along n (`values`, m and k in `fixed`) for each tile, and of the guide's sweep."""
    vals, gvals = sorted(int(v) for v in values), sorted(int(v) for v in guide_values)
    return CliffPrediction(int(sms), tuple((parse_tile(t), tuple(cliffs("n", vals, fixed, sms=sms, tile=t))) for t in tiles),
                           (int(guide_fixed["m"]), int(guide_fixed["k"])), (gvals[0], gvals[-1]),
                           tuple(cliffs("n", gvals, guide_fixed, sms=sms, tile=(256, 128))))
