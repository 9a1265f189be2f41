"""Lesson 13's panel, a pure function of the widget values (perflab.course.widgets.Panel calls it),
returning (figure, table, text); a config that cannot run raises InputError with one line.

`attention(...)`: predicted against counted bytes of the fused kernel (and the standard path's
prediction) over sequence length, and the compiled kernel's occupancy, for one tile configuration.
Counts come from Triton's interpreter (`flash.count_totals`, memoised; one child process per change
where Triton runs natively); the compile (`compiled.compile_attention`) from lesson 04's on-disk cache
after the first time.
"""

from __future__ import annotations

from typing import Any

from perflab.attention import compiled, flash
from perflab.attention import formulas as io

_ATTENTION_COUNTS: dict[tuple[int, int, int, int, bool], int] = {}


def _attention_counts(sizes: list[int], d: int, block_m: int, block_n: int, causal: bool) -> list[int]:
    """Counted bytes per sequence length (memoised; the missing ones in one interpreter run)."""
    keys = [(s, d, block_m, block_n, causal) for s in sizes]
    todo = [k for k in dict.fromkeys(keys) if k not in _ATTENTION_COUNTS]
    if todo:
        got = flash.count_totals([dict(b=1, a=1, s=k[0], d=d, dtype="fp16", causal=causal, block_m=block_m,
                                       block_n=block_n) for k in todo])
        _ATTENTION_COUNTS.update(zip(todo, got, strict=True))
    return [_ATTENTION_COUNTS[k] for k in keys]


def attention_bytes_frame(seq: int, head_dim: int = 64, block_m: int = 64, block_n: int = 64, causal: bool = False,
                points: int = 3, count: bool = True):
    """One head, fp16: per sequence length (seq/points … seq), the fused kernel's predicted bytes, the
    bytes counted in the interpreter, and the standard path's predicted bytes."""
    import pandas as pd

    sizes = [max(1, seq * i // points) for i in range(1, points + 1)]
    counted = _attention_counts(sizes, head_dim, block_m, block_n, causal) if count else [None] * len(sizes)
    rows = [{"seq": s, "flash_predicted": io.flash_bytes(1, 1, s, head_dim, 2, block_m=block_m, block_n=block_n,
                                                         causal=causal)["total"],
             "flash_counted": c, "standard_predicted": io.standard_bytes(1, 1, s, head_dim, 2)["total"]}
            for s, c in zip(sizes, counted, strict=True)]
    return pd.DataFrame(rows)


def attention_figure(df, title: str):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(df["seq"], df["standard_predicted"] / 1e6, "s--", color="tab:red", label="standard, predicted (S and P in memory)")
    ax.plot(df["seq"], df["flash_predicted"] / 1e6, "-", color="tab:blue", label="fused, predicted (formula)")
    if df["flash_counted"].notna().all():
        ax.plot(df["seq"], df["flash_counted"] / 1e6, "o", color="tab:blue", mfc="none", ms=9,
                label="fused, counted (every tl.load/tl.store)")
    ax.set_xlabel("sequence length s")
    ax.set_ylabel("bytes moved, MB (1 MB = 1e6 B)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    plt.close(fig)
    return fig


def attention(seq: int = 256, head_dim: int = 64, block_m: int = 64, block_n: int = 64, causal: bool = False,
          target: str = "sm_90", compile_kernel: bool = True) -> tuple[Any, Any, str]:
    """(attention_figure, table, text) for one configuration: bytes over s, and the compiled kernel's occupancy."""

    from perflab.core.readout import nbytes

    df = attention_bytes_frame(int(seq), int(head_dim), int(block_m), int(block_n), bool(causal))
    last = df.iloc[-1]
    fig = attention_figure(df, f"one head, d = {head_dim}, fp16, tiles {block_m}×{block_n}{', causal' if causal else ''}")
    text = (f"s = {int(last['seq'])}: fused predicted {nbytes(last['flash_predicted'])}, counted "
            f"{nbytes(last['flash_counted'])}; standard predicted {nbytes(last['standard_predicted'])} "
            f"({last['standard_predicted'] / last['flash_predicted']:.1f}× the fused kernel's)")
    table = df
    if compile_kernel:
        r = compiled.compile_attention(int(block_m), int(block_n), int(head_dim), "fp16", target, causal=bool(causal))
        table, _ = compiled.compiled_frame([r])
        if r.cannot_run:
            text += f"\n{r.target}: cannot run: {r.cannot_run}"
        else:
            text += (f"\n{r.target} ({r.gpu}): {r.registers} registers/thread, {r.spill_bytes} B spilled, "
                     f"{nbytes(r.shared_bytes or 0)} shared/block → {r.blocks_per_sm} blocks per SM "
                     f"({r.occupancy or 0.0:.1%} occupancy), limited by {r.limited_by}")
    return fig, table, text
