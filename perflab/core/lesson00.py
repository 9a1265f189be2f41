"""Lesson 00's sizes by where it runs: smoke (the tests), a CPU, a GPU. One table, read once by the lesson
(`size = ctx.sizes(SIZES)`, `perflab.core.sizes`).

The CPU sizes keep the lesson within about a minute on a 2-core machine (a 1024³ fp32 matmul in each
dtype, copies up to 256 MiB, the denormal matmul at 512); a GPU measures the sizes that fill it (an
8192³ matmul, copies up to 2 GiB, past any GPU's L2, and 512 MiB host→device transfers). The denormal
matmul runs on the CPU at the CPU's size everywhere: GPUs handle denormals at full speed, so there is
nothing larger to show there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    n_sync: int  # section 3: the n³ fp32 matmul timed call by call, with and without waiting
    n_matmul: int  # section 4: the n³ matmul in every dtype
    matmul_rep_ms: float
    copy_mib: tuple[int, ...]  # section 5: copy buffers, MiB
    copy_rep_ms: float
    h2d_mib: int  # section 6 (GPU only): host→device transfer, MiB
    n_denormal: int  # section 7: the fp32 matmul with denormal rows
    denormal_rep_ms: float
    denormal_warmup_ms: float
    story_seq: int  # section 7: tokens of the untrained model's step
    story_reps: int  # forward + backward passes timed per version (the fastest counts)
    panel_n: int  # the panel's matmul: its default size and the slider's largest
    panel_max_n: int
    panel_rep_ms: float
    panel_warmup_ms: float


_CPU_COPIES = (1, 2, 4, 8, 16, 32, 64, 128, 256)

SIZES: dict[str, Sizes] = {
    "smoke": Sizes(n_sync=128, n_matmul=128, matmul_rep_ms=10, copy_mib=(1, 4, 16), copy_rep_ms=5, h2d_mib=8,
                   n_denormal=128, denormal_rep_ms=8, denormal_warmup_ms=2, story_seq=32, story_reps=2, panel_n=64,
                   panel_max_n=256, panel_rep_ms=5, panel_warmup_ms=1),
    "cpu": Sizes(n_sync=512, n_matmul=1024, matmul_rep_ms=200, copy_mib=_CPU_COPIES, copy_rep_ms=100, h2d_mib=512,
                 n_denormal=512, denormal_rep_ms=60, denormal_warmup_ms=10, story_seq=128, story_reps=3, panel_n=256,
                 panel_max_n=2048, panel_rep_ms=50, panel_warmup_ms=10),
    "gpu": Sizes(n_sync=4096, n_matmul=8192, matmul_rep_ms=200, copy_mib=(*_CPU_COPIES, 512, 1024, 2048), copy_rep_ms=100,
                 h2d_mib=512, n_denormal=512, denormal_rep_ms=60, denormal_warmup_ms=10, story_seq=128, story_reps=3,
                 panel_n=2048, panel_max_n=8192, panel_rep_ms=50, panel_warmup_ms=10),
}
