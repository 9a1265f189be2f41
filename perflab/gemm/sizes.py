"""The gemm lessons' sizes by where they run: smoke (the tests), a CPU, a GPU. One table per lesson,
read once by the lesson (`size = ctx.sizes(TILES)`, `perflab.core.sizes`).

`TILES`, lesson 04 (tiles and waves): the fine sweep over n, the head-size sweep, the MAMF search and
the Triton tile's check. A GPU sweeps the guide's GEMM (m = 2304, k = 4096, n from 128 to 6144 in
steps of 32, bf16); a CPU sweeps a GEMM its cores finish in seconds (fp32), and the whole lesson stays
within about a minute on a 2-core machine; smoke sizes only check that every cell runs. Every row also
names the guide's GPU sweep (`guide_*`): the model predicts its cliffs whatever this device is.

`SWIGLU`, lesson 05 (a SwiGLU width): the hidden size h, the tokens per batch and the widths searched
around ⌊8/3·h⌋ (± radius, in steps), with each width's timing budgets. A GPU searches the published
H100 run's sweep (h = 4096, 8192 tokens, 51 widths); a CPU a search its cores finish within about a
minute (h = 512, 256 tokens); smoke sizes only check that every cell runs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TilesSizes:
    """Lesson 04's sizes for one kind of run (milliseconds are time budgets of `perflab.core.timing.bench`)."""

    sweep_m: int  # section 4: the GEMM swept along n, m and k fixed
    sweep_k: int
    sweep_n: tuple[int, int, int]  # start, stop, step (elements)
    sweep_rep_ms: float
    sweep_warmup_ms: float
    heads_h: int  # section 6: attention over every split of h into heads, b sequences of s tokens
    heads_b: int
    heads_s: int
    heads_min_d: int
    mamf_range: tuple[int, int, int]  # section 8: m, n and k each over start, stop, step
    mamf_rep_ms: float
    mamf_warmup_ms: float
    triton_shape: tuple[int, int, int]  # section 9: the Triton matmul checked against torch (m, n, k)
    triton_tile: tuple[int, int, int]  # its BLOCK_M, BLOCK_N, BLOCK_K
    heads_max_d: int = 256
    guide_m: int = 2304  # the guide's GEMM (NVIDIA's worked example), swept on a GPU
    guide_k: int = 4096
    guide_n: tuple[int, int, int] = (128, 6144, 32)

    @property
    def sweep_fixed(self) -> dict[str, int]:
        return {"m": self.sweep_m, "k": self.sweep_k}

    @property
    def sweep_values(self) -> list[int]:
        from perflab.gemm.shapes import fine_values

        return fine_values(*self.sweep_n)

    @property
    def guide_fixed(self) -> dict[str, int]:
        return {"m": self.guide_m, "k": self.guide_k}

    @property
    def guide_values(self) -> list[int]:
        from perflab.gemm.shapes import fine_values

        return fine_values(*self.guide_n)

    @property
    def mamf_values(self) -> list[int]:
        from perflab.gemm.mamf import parse_range

        return parse_range(*self.mamf_range)


TILES: dict[str, TilesSizes] = {
    "smoke": TilesSizes(sweep_m=64, sweep_k=64, sweep_n=(8, 96, 8), sweep_rep_ms=3, sweep_warmup_ms=1, heads_h=128,
                        heads_b=1, heads_s=32, heads_min_d=32, mamf_range=(32, 96, 32), mamf_rep_ms=2,
                        mamf_warmup_ms=1, triton_shape=(67, 45, 53), triton_tile=(32, 32, 16)),
    "cpu": TilesSizes(sweep_m=512, sweep_k=512, sweep_n=(32, 1024, 16), sweep_rep_ms=30, sweep_warmup_ms=5,
                      heads_h=640, heads_b=1, heads_s=256, heads_min_d=16, mamf_range=(128, 1024, 128),
                      mamf_rep_ms=20, mamf_warmup_ms=5, triton_shape=(200, 130, 96), triton_tile=(64, 64, 32)),
    "gpu": TilesSizes(sweep_m=2304, sweep_k=4096, sweep_n=(128, 6144, 32), sweep_rep_ms=30, sweep_warmup_ms=10,
                      heads_h=2560, heads_b=4, heads_s=2048, heads_min_d=16, mamf_range=(1024, 8192, 512),
                      mamf_rep_ms=40, mamf_warmup_ms=10, triton_shape=(1000, 1000, 1000), triton_tile=(64, 64, 32)),
}


@dataclass(frozen=True)
class SwigluSizes:
    """Lesson 05's sizes for one kind of run (`perflab.gemm.swiglu.search_sized` runs the search at them)."""

    h: int  # hidden size
    tokens: int  # b·s rows of the MLP's GEMMs
    radius: int  # widths within ⌊8/3·h⌋ ± radius ...
    step: int  # ... that are multiples of step
    rep_ms: float  # timing budget per width
    warmup_ms: float


SWIGLU: dict[str, SwigluSizes] = {
    "smoke": SwigluSizes(h=64, tokens=32, radius=8, step=4, rep_ms=2, warmup_ms=1),
    "cpu": SwigluSizes(h=512, tokens=256, radius=24, step=4, rep_ms=30, warmup_ms=10),
    "gpu": SwigluSizes(h=4096, tokens=8192, radius=100, step=4, rep_ms=100, warmup_ms=25),
}
