"""The GEMM lessons' panels, pure functions of the widget values (perflab.course.widgets.Panel calls
them), each returning (figure, table, text); a config that cannot run raises InputError with one line.

- `tile_config(...)`, lesson 04: compile the Triton matmul for a GPU, draw its occupancy and the
  staircase it predicts beside lesson 04's assumed-tile wave model, show the PTX, and on a GPU time it.
(Lesson 13's attention panel is `perflab.attention.panel`.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perflab.core.errors import InputError
from perflab.gemm import compiled
from perflab.gemm import triton_matmul as tm
from perflab.gemm.shapes import wave_model

if TYPE_CHECKING:  # pragma: no cover
    from perflab.core.ceiling import CeilingRecord

ASSUMED_TILE = (256, 128)  # lesson 04's model: one 256×128 block per SM (the guide's cuBLAS tile)


def staircase_frame(r: compiled.CompiledTile, m: int, n: int, k: int, points: int = 96):
    """Utilization along n (n/4 … 2n) from the compiled kernel, and from lesson 04's assumed tile."""
    import pandas as pd

    if r.limits is None or r.occ is None:
        raise InputError(r.cannot_run or f"no per-SM limits for {r.target}")
    sms = r.limits.sm_count
    lo, hi = max(16, n // 4), max(32, 2 * n)
    step = max(1, (hi - lo) // points)
    rows = []
    for v in range(lo, hi + 1, step):
        ours = wave_model(m, v, k, sms=sms, tile=(r.config.block_m, r.config.block_n), blocks_per_sm=r.occ.blocks_per_sm)
        assumed = wave_model(m, v, k, sms=sms, tile=ASSUMED_TILE, blocks_per_sm=1)
        rows.append({"n": v, "compiled": ours.utilization, "assumed": assumed.utilization, "waves": ours.waves})
    return pd.DataFrame(rows)


def figure(r: compiled.CompiledTile, m: int, n: int, k: int):
    import matplotlib.pyplot as plt

    assert r.limits is not None and r.occ is not None
    df = staircase_frame(r, m, n, k)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [2.2, 1]})
    ax1.step(df["n"], df["compiled"] * 100, where="post",
             label=f"compiled {r.config.block_m}×{r.config.block_n}, {r.occ.blocks_per_sm} block(s)/SM")
    ax1.step(df["n"], df["assumed"] * 100, where="post", ls="--", alpha=0.7,
             label=f"lesson 04's model: {ASSUMED_TILE[0]}×{ASSUMED_TILE[1]}, 1 block/SM")
    ax1.axvline(n, color="grey", lw=0.8)
    ax1.set_xlabel(f"n (m = {m}, k = {k})")
    ax1.set_ylabel("predicted useful share of the GPU (%)")
    ax1.set_ylim(0, 105)
    ax1.set_title(f"Waves on {r.limits.name} ({r.limits.sm_count} SMs)")
    ax1.legend(fontsize=8, loc="lower right")
    names = list(r.occ.blocks_by)
    vals = [min(r.occ.blocks_by[x], r.limits.max_blocks) for x in names]
    colors = ["tab:red" if x in r.occ.limited_by.split(" and ") else "tab:grey" for x in names]
    ax2.barh(names, vals, color=colors)
    ax2.set_xlabel("blocks per SM this limit allows")
    ax2.set_title(f"occupancy {r.occ.occupancy:.0%}\nlimited by {r.occ.limited_by}", fontsize=10)
    for i, v in enumerate(vals):
        ax2.text(v, i, f" {v}", va="center", fontsize=8)
    fig.tight_layout()
    return fig


def table(r: compiled.CompiledTile, m: int, n: int, k: int):
    import pandas as pd

    from perflab.core.readout import mib, percent

    assert r.limits is not None and r.occ is not None
    w = compiled.waves(r, m, n, k)
    rows = [
        ("registers per thread", f"{r.registers}", "cuobjdump REG (limit 255)"),
        ("spilled bytes per thread", f"{r.spill_bytes} B", "cuobjdump STACK"),
        ("shared memory per block", mib(r.shared_bytes),
         f"Triton metadata + static; limit {mib(r.limits.max_shared_bytes_per_block)}"),
        ("warps per block", f"{r.num_warps}", f"{r.num_stages} pipeline stages"),
        ("Tensor Core instructions", f"{r.tensor_core_instructions} {r.tensor_core_kind or ''}".strip(), "in the PTX"),
        ("blocks per SM", f"{r.occ.blocks_per_sm}", f"limited by {r.occ.limited_by}"),
        ("occupancy", percent(r.occ.occupancy), f"{r.occ.warps_per_sm} of {r.limits.max_warps} warps"),
        ("tiles", f"{w.tiles:,}", f"{w.tiles_m} × {w.tiles_n}"),
        ("waves", f"{w.waves}", f"of {w.wave_size} blocks ({r.limits.sm_count} SMs × {r.occ.blocks_per_sm})"),
        ("wave efficiency", percent(w.wave_utilization), f"last wave {w.last_wave_tiles} of {w.wave_size}"),
        ("tile efficiency", percent(w.tile_utilization), "useful share of the computed outputs"),
    ]
    return pd.DataFrame(rows, columns=["", "value", "from"]).set_index("")


def time_on_gpu(cfg: tm.TileConfig, dtype: str, m: int, n: int, k: int, target_cc: int, device=None) -> str:
    """On a CUDA GPU of the target's architecture: the kernel and torch.matmul in TFLOP/s, and as a
    share of the measured matmul ceiling (perflab mamf). Otherwise one line saying why not."""
    import torch

    if not torch.cuda.is_available() or (device is not None and torch.device(device).type != "cuda"):
        return ("No GPU here: the kernel is compiled, not timed. (Triton's interpreter could run it, but its "
                "timings say nothing about a GPU.)")
    major, minor = torch.cuda.get_device_capability()
    if major * 10 + minor != target_cc:
        return (f"This GPU is sm_{major}{minor}, the target sm_{target_cc}: pick target sm_{major}{minor} to time "
                "the kernel you compiled.")
    from perflab.core.readout import num
    from perflab.core.timing import bench
    from perflab.gemm import mamf

    dt = tm.torch_dtype(dtype)
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(k, n, device="cuda", dtype=dt)
    ours = bench(lambda: tm.matmul(a, b, cfg), device="cuda", rep_ms=50)
    ref = bench(lambda: a @ b, device="cuda", rep_ms=50)
    flops = 2 * m * n * k
    t_ours, t_ref = flops / ours.median_s / 1e12, flops / ref.median_s / 1e12
    busy = [q.line() for q in (getattr(ours, "quietness", None), getattr(ref, "quietness", None))
            if q is not None and q.disturbed]
    out = f"measured: this kernel {num(t_ours)} TFLOP/s, torch.matmul {num(t_ref)} TFLOP/s"
    out += ceiling_share([t_ours, t_ref], mamf.ceiling_record("cuda", dtype))
    return out + (f" (inconclusive: the machine was busy, {busy[0]})" if busy else "")


def ceiling_share(tflops: list[float], record: CeilingRecord | None) -> str:
    """'; 71 % and 83 % of the measured ceiling 612 TFLOP/s (2026-11-26)', never above 100 %: a rate above
    the stored ceiling makes that ceiling suspect, and the text says so instead of a share."""
    from perflab.core.readout import num

    if not record:
        return "; no measured ceiling yet (run section 8 or `perflab mamf`)"
    c = float(record.tflops)
    when = str(record.date)[:10]
    if max(tflops) > c:
        return (f"; faster than the measured ceiling {num(c)} TFLOP/s ({when}), so that ceiling is suspect: measure "
                "it again (`perflab mamf --fresh`) on a quiet machine")
    return "; " + " and ".join(f"{t / c:.0%}" for t in tflops).replace("%", " %") + \
        f" of the measured ceiling {num(c)} TFLOP/s ({when})"


BUSY = "compiling the tile with Triton (a new config takes seconds; one seen before comes from the cache)"
BLOCK_MN = (16, 256)  # BLOCK_M and BLOCK_N: powers of two in this range (Triton's tl.arange needs a power of two)


def refusal(**values) -> str | None:
    """The one line the panel shows for these control values when the config cannot run, or None
    when it compiles (the lesson shows refusals with this, without moving the learner's panel)."""
    from perflab.core.errors import PerflabError, one_line

    try:
        tile_config(**values)
    except PerflabError as e:
        return one_line(e)
    return None


def tile_config(block_m: int = 128, block_n: int = 128, block_k: int = 64, num_warps: int = 4, num_stages: int = 3,
                dtype: str = "fp16", target: str = "sm_90", m: int = 4096, n: int = 4096, k: int = 4096,
                device=None) -> tuple[Any, Any, str]:
    """Compile (or fetch from the cache) and describe one config: (figure, table, text)."""
    tm.require()
    cfg = tm.TileConfig(int(block_m), int(block_n), int(block_k), int(num_warps), int(num_stages))
    compiled.check_config(cfg, dtype, target)
    r = compiled.compile_tile(cfg, dtype, target, shape=(m, n, k))
    if r.cannot_run:
        raise InputError(r.cannot_run)
    if r.occ is None:
        raise InputError(f"no per-SM limits for {r.target} in perflab's table: choose sm_80 or sm_90")
    how = "from the cache" if r.cached else f"compiled in {r.seconds:.1f} s"
    text = (f"{cfg.label()} {r.dtype} for {r.target} ({how}). PTX, the first Tensor Core instructions:\n"
            + "\n".join(line[:110] for line in r.ptx_excerpt.splitlines()[:6])
            + "\n" + time_on_gpu(cfg, r.dtype, m, n, k, compiled.parse_target(target), device))
    return figure(r, m, n, k), table(r, m, n, k), text
