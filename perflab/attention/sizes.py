"""Lesson 13's sizes by where it runs: smoke (the tests), a CPU, a GPU. One table, read once by the lesson
(`size = ctx.sizes(SIZES)`, `perflab.core.sizes`).

On a CPU the kernel runs in Triton's interpreter (numpy: every program in turn), so the shapes it checks
and counts stay at a few hundred positions; the formulas' examples (section 5's FLOPs, section 6's
tiles) cost nothing and keep their full size. A GPU checks longer sequences natively and times the
kernel against SDPA at 4×16×4096×128 in bf16; smoke mode keeps one or two of everything.
"""

from __future__ import annotations

from dataclasses import dataclass

Shape = tuple[int, int, int, int]  # b, a, s, d


@dataclass(frozen=True)
class Sizes:
    checks: tuple[tuple[int, int, bool, str], ...]  # section 2: (seq, head_dim, causal, dtype) against SDPA
    count_seq: int  # section 3: the head whose loads and stores are counted (d = 64, fp16)
    count_block_m: int
    count_block_n: int
    odd: tuple[tuple[int, int, int, bool], ...]  # section 3: (seq, block_m, block_n, causal) counted against the formula
    eager_seqs: tuple[int, ...]  # section 3: the eager path's bytes counted at these lengths
    flops_shape: Shape  # section 5: the FLOPs example
    backward_seq: int  # section 5: the recompute backward checked against autograd
    timed_shape: Shape  # section 5, on a GPU only: the kernel timed against SDPA's flash backend
    tiles: tuple[tuple[int, int], ...]  # section 6: (BLOCK_M, BLOCK_N) compiled for sm_90 and sm_80
    head_dims: tuple[int, ...]
    panel_seq: int  # section 7: the panel's starting sequence length and BLOCK_N
    panel_block_n: int


_TILES = ((64, 64), (128, 64), (128, 128), (256, 256))
_ODD = ((200, 64, 32, True), (333, 32, 64, True), (333, 64, 64, False))

SIZES: dict[str, Sizes] = {
    "smoke": Sizes(checks=((37, 64, True, "fp16"), (21, 128, False, "bf16")), count_seq=64, count_block_m=32,
                   count_block_n=32, odd=((50, 16, 32, True),), eager_seqs=(32, 64), flops_shape=(1, 2, 64, 64),
                   backward_seq=40, timed_shape=(1, 2, 256, 64), tiles=((64, 64),), head_dims=(64,), panel_seq=64,
                   panel_block_n=32),
    "cpu": Sizes(checks=((77, 64, False, "fp16"), (77, 64, True, "fp16"), (133, 128, True, "bf16"), (200, 128, False, "bf16")),
                 count_seq=256, count_block_m=64, count_block_n=64, odd=_ODD, eager_seqs=(128, 256, 512),
                 flops_shape=(8, 16, 2048, 128), backward_seq=96, timed_shape=(4, 16, 4096, 128), tiles=_TILES,
                 head_dims=(64, 128), panel_seq=256, panel_block_n=64),
    "gpu": Sizes(checks=((77, 64, False, "fp16"), (77, 64, True, "fp16"), (333, 128, True, "bf16"), (1000, 128, False, "bf16")),
                 count_seq=256, count_block_m=64, count_block_n=64, odd=_ODD, eager_seqs=(128, 256, 512),
                 flops_shape=(8, 16, 2048, 128), backward_seq=128, timed_shape=(4, 16, 4096, 128), tiles=_TILES,
                 head_dims=(64, 128), panel_seq=256, panel_block_n=64),
}
