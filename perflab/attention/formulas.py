"""Lesson 13: attention's bytes and FLOPs, predicted by formula (the counts come from `flash`).

Sizes: b batch, a heads, s sequence length, d head dimension, `item` bytes per element of Q, K, V
and O (2 for fp16/bf16). "Bytes" are bytes moved between the GPU's memory (HBM) and the chip.

**Standard attention** (Dao et al. 2022, FlashAttention, Algorithm 0): S = Q·Kᵀ is written to
memory, read back by the softmax, which writes P, read back by P·V:

    per head:  read Q, K (2·s·d) + write S (s²) + read S (s²) + write P (s²) + read P, V (s² + s·d)
               + write O (s·d)    =  (4·s·d + 4·s²) · item bytes

The s² terms are the point: at s = 8192 they are 4·s²·item = 512 MiB per head in fp16 against
4·s·d·item = 4 MiB for Q, K, V and O (d = 64).

**FlashAttention's forward** (Dao et al. 2022, Theorem 2; the course's Triton kernel, in
FlashAttention-2's loop order, Dao 2023 §3.1): each program loads a BLOCK_M tile of Q once, streams every K and V block past it, and writes its
O tile and the fp32 log-sum-exp of its rows. So Q and O move once, and K and V once per Q tile:

    per head:  Q: s·d·item + O: s·d·item + lse: 4·s + K, V: 2 · d·item · Σ_tiles keys(tile)

where keys(tile) = s without a causal mask (⌈s/BLOCK_M⌉ tiles × s keys) and, with one, the keys
up to the end of the last K block that the tile's last row needs (about half). `flash_bytes` is
this exact sum (what the kernel's masked loads move); `flash_bytes_closed` the usual closed form
2·⌈s/BLOCK_M⌉·s·d·item for K and V ((⌈s/BLOCK_M⌉ + 1)·s·d·item causal), which the sum equals
without a causal mask and, with one, when the blocks divide s.

**FLOPs** (counting the two matmuls, as FlashAttention's papers and benchmarks do; the softmax's
O(s²) exponentials are not counted): forward 4·s²·d per head (Q·Kᵀ and P·V, 2·s²·d each), half
with a causal mask. The backward has five matmuls (dV = Pᵀ·dO, dP = dO·Vᵀ, dS → dQ = dS·K,
dK = dSᵀ·Q, and the recomputed S = Q·Kᵀ): 2.5× the forward when it recomputes S, 2× when it keeps
P from the forward (Tri Dao, Dao-AILab/flash-attention#741 and #1525). A training step's model
FLOPs are forward + 2× forward; its hardware FLOPs forward + 2.5× forward — lesson 02's MFU and
HFU (perflab.flops.mfu), applied to one layer; `fraction_of_peak` divides through
`perflab.flops.mfu.utilization`, as every MFU does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON
from perflab.core.validate import positive_int

LSE_ITEMSIZE = 4  # the log-sum-exp is stored in fp32
BACKWARD_RATIO_RECOMPUTE = 2.5  # five matmuls against the forward's two (flash-attention#741, #1525)
BACKWARD_RATIO_STORED = 2.0  # four matmuls: P kept from the forward


def _sizes(b: int, a: int, s: int, d: int) -> tuple[int, int, int, int]:
    return positive_int("batch", b), positive_int("heads", a), positive_int("seq", s), positive_int("head_dim", d)


def _item(itemsize: int) -> int:
    if itemsize not in (1, 2, 4, 8):
        raise InputError(f"itemsize {itemsize!r}: give the bytes per element (2 for fp16/bf16, 4 for fp32)")
    return itemsize


def q_tiles(s: int, block_m: int) -> int:
    """How many BLOCK_M tiles of queries cover s rows: ⌈s / BLOCK_M⌉."""
    return -(-positive_int("seq", s) // positive_int("block_m", block_m))


def keys_read(s: int, block_m: int, block_n: int, causal: bool) -> int:
    """Σ over Q tiles of the key rows the kernel loads for it (masked rows past s not counted).

    Without a causal mask every tile reads all s keys. With one, tile i's loop runs over the K
    blocks starting below hi = min(s, (i+1)·BLOCK_M), and each loads min(BLOCK_N, s − start) rows.
    """
    s, bm, bn = positive_int("seq", s), positive_int("block_m", block_m), positive_int("block_n", block_n)
    return sum(tile_keys(s, bm, bn)) if causal else q_tiles(s, bm) * s


def flash_bytes(b: int, a: int, s: int, d: int, itemsize: int = 2, *, block_m: int = 64, block_n: int = 64,
                causal: bool = False) -> dict[str, int]:
    """Bytes the fused forward moves, by tensor: {'q', 'k', 'v', 'o', 'lse', 'read', 'written', 'total'}."""
    b, a, s, d = _sizes(b, a, s, d)
    item = _item(itemsize)
    heads = b * a
    kv = heads * keys_read(s, block_m, block_n, causal) * d * item
    out = {"q": heads * s * d * item, "k": kv, "v": kv, "o": heads * s * d * item, "lse": heads * s * LSE_ITEMSIZE}
    out["read"] = out["q"] + out["k"] + out["v"]
    out["written"] = out["o"] + out["lse"]
    out["total"] = out["read"] + out["written"]
    return out


def flash_bytes_closed(b: int, a: int, s: int, d: int, itemsize: int = 2, *, block_m: int = 64,
                       causal: bool = False) -> int:
    """The closed form: b·a·(2·s·d·item + 4·s + K and V), with K and V = 2·T·s·d·item for T = ⌈s/BLOCK_M⌉
    Q tiles, and (T + 1)·s·d·item with a causal mask (tile i reads (i+1)·BLOCK_M keys: Σ = s·(T+1)/2).

    Equal to `flash_bytes` without a mask, and with one when BLOCK_M divides s and BLOCK_N divides
    BLOCK_M; otherwise the last partial tile and the K blocks rounded up to BLOCK_N make the
    difference: the "masking's rounding"."""
    b, a, s, d = _sizes(b, a, s, d)
    item = _item(itemsize)
    t = q_tiles(s, block_m)
    kv = (t + 1) * s * d * item if causal else 2 * t * s * d * item
    return b * a * (2 * s * d * item + LSE_ITEMSIZE * s + kv)


def tile_keys(s: int, block_m: int, block_n: int) -> list[int]:
    """With a causal mask: the key rows each Q tile's loop loads, tile by tile (`keys_read` sums them):
    up to the end of the K block that holds the tile's last row, cut at s."""
    s, bm, bn = positive_int("seq", s), positive_int("block_m", block_m), positive_int("block_n", block_n)
    return [min(-(-min(s, (i + 1) * bm) // bn) * bn, s) for i in range(q_tiles(s, bm))]


@dataclass(frozen=True)
class CausalGap:
    """Why the causal closed form differs from the exact count, for one head (`causal_gap`)."""

    tile_keys: list[int]  # the key rows each Q tile loads
    keys: int  # their sum
    closed_keys: float  # what the closed form assumes: s·(T+1)/2
    gap_bytes: int  # the difference, K and V together
    text: str  # the computation in words


def causal_gap(s: int, d: int, itemsize: int = 2, *, block_m: int = 64, block_n: int = 64) -> CausalGap:
    """Why the causal closed form differs from the exact count, shown as the computation for one head.

    The closed form (T+1)·s·d for K and V assumes tile i reads (i+1)·s/T keys (Σ = s·(T+1)/2 per
    tensor); the kernel's tile i reads `tile_keys`: whole BLOCK_M tiles (the last one ragged when
    BLOCK_M does not divide s) and whole K blocks past the diagonal."""
    item = _item(itemsize)
    d = positive_int("head_dim", d)
    per_tile = tile_keys(s, block_m, block_n)
    t = len(per_tile)
    keys = sum(per_tile)
    gap = 2 * keys * d * item - (t + 1) * s * d * item
    closed = s * (t + 1) / 2
    text = (f"s = {s}, BLOCK_M = {block_m}, BLOCK_N = {block_n}: the {t} tiles load "
            f"{' + '.join(str(k) for k in per_tile)} = {keys:,} keys each of K and V; the closed form assumes "
            f"s·(T+1)/2 = {s}·{t + 1}/2 = {closed:,.{0 if closed == int(closed) else 1}f}. "
            f"The difference, × 2 tensors × d = {d} × {item} B, is {gap:,} B.")
    return CausalGap(per_tile, keys, closed, gap, text)


def standard_bytes(b: int, a: int, s: int, d: int, itemsize: int = 2) -> dict[str, int]:
    """Bytes standard attention moves (FlashAttention paper, Algorithm 0): {'qkvo', 'scores', 'total'}.

    'scores' is the s² part: S written and read, P written and read (4·s² elements per head)."""
    b, a, s, d = _sizes(b, a, s, d)
    item = _item(itemsize)
    qkvo = b * a * 4 * s * d * item
    scores = b * a * 4 * s * s * item
    return {"qkvo": qkvo, "scores": scores, "total": qkvo + scores}


def memory_bytes(b: int, a: int, s: int, d: int, itemsize: int = 2) -> dict[str, int]:
    """Bytes of the tensors each path holds at once beyond Q, K, V and O.

    Standard attention materialises S and P (b·a·s² elements each; P is also what a backward
    without recompute keeps); FlashAttention keeps only the log-sum-exp (b·a·s fp32 values)."""
    b, a, s, d = _sizes(b, a, s, d)
    item = _item(itemsize)
    return {"standard": 2 * b * a * s * s * item, "flash": b * a * s * LSE_ITEMSIZE,
            "qkvo": 4 * b * a * s * d * item}


@dataclass(frozen=True)
class LongSequences:
    """What each path holds at long sequences (`memory_bytes`), for b sequences of a heads."""

    batch: int
    heads: int
    head_dim: int
    itemsize: int
    seqs: tuple[int, ...]

    def bytes(self, s: int) -> dict[str, int]:
        return memory_bytes(self.batch, self.heads, s, self.head_dim, self.itemsize)

    def standard_gib(self, s: int) -> float:
        """GiB (2^30 bytes) of S and P at sequence length s."""
        return self.bytes(s)["standard"] / 2**30

    def table(self):
        import pandas as pd

        return pd.DataFrame([{"seq": s, "standard: S and P (GiB)": f"{m['standard'] / 2**30:,g}",
                              "fused: log-sum-exp (MiB)": f"{m['flash'] / 2**20:,g}",
                              f"Q, K, V, O at d = {self.head_dim} (GiB)": f"{m['qkvo'] / 2**30:,g}"}
                             for s, m in ((s, self.bytes(s)) for s in self.seqs)])


def long_sequences(seqs=(8192, 32768), b: int = 1, a: int = 32, d: int = 128, itemsize: int = 2) -> LongSequences:
    """`memory_bytes` at each of `seqs` (lesson 13's section 4: one sequence of 32 heads, fp16)."""
    return LongSequences(positive_int("batch", b), positive_int("heads", a), positive_int("head_dim", d), _item(itemsize),
                         tuple(positive_int("seq", s) for s in seqs))


def forward_flops(b: int, a: int, s: int, d: int, causal: bool = False, *, exact_causal: bool = False) -> int:
    """4·b·a·s²·d for Q·Kᵀ and P·V; half of it with a causal mask (the convention of FlashAttention's
    benchmarks). `exact_causal`: only the s·(s+1)/2 scores a causal mask keeps, 4·b·a·d·s(s+1)/2."""
    b, a, s, d = _sizes(b, a, s, d)
    if causal and exact_causal:
        return 4 * b * a * d * s * (s + 1) // 2
    f = 4 * b * a * s * s * d
    return f // 2 if causal else f


def backward_flops(b: int, a: int, s: int, d: int, causal: bool = False, *, recompute: bool = True) -> float:
    """2.5× the forward when the backward recomputes S = Q·Kᵀ (FlashAttention), 2× when it keeps P."""
    ratio = BACKWARD_RATIO_RECOMPUTE if recompute else BACKWARD_RATIO_STORED
    return ratio * forward_flops(b, a, s, d, causal)


def step_flops(b: int, a: int, s: int, d: int, causal: bool = False) -> dict[str, float]:
    """Model and hardware FLOPs of one forward + backward of attention (lesson 02's MFU and HFU).

    model = forward + 2× forward (what the maths needs: the backward of two matmuls is four);
    hardware = forward + 2.5× forward (what a FlashAttention backward computes: S again)."""
    f = forward_flops(b, a, s, d, causal)
    return {"forward": float(f), "model": float(f + backward_flops(b, a, s, d, causal, recompute=False)),
            "hardware": float(f + backward_flops(b, a, s, d, causal, recompute=True))}


@dataclass(frozen=True)
class AttentionFlops:
    """One attention layer's FLOPs, with and without a causal mask (`step_flops`, `backward_flops`)."""

    batch: int
    heads: int
    seq: int
    head_dim: int

    def describe(self) -> str:
        return f"b = {self.batch}, heads = {self.heads}, s = {self.seq}, d = {self.head_dim}"

    def table(self):
        """GFLOPs (1e9) per causal setting: forward, the recompute backward, and a step's model and
        hardware FLOPs."""
        import pandas as pd

        from perflab.core.readout import num

        shape = (self.batch, self.heads, self.seq, self.head_dim)
        rows = []
        for causal in (False, True):
            st = step_flops(*shape, causal=causal)
            rows.append({"causal": causal, "forward (GFLOPs)": num(st["forward"] / 1e9, 4),
                         "backward, recompute (GFLOPs)": num(backward_flops(*shape, causal=causal) / 1e9, 4),
                         "step, model FLOPs (GFLOPs)": num(st["model"] / 1e9, 4),
                         "step, hardware FLOPs (GFLOPs)": num(st["hardware"] / 1e9, 4)})
        return pd.DataFrame(rows)


def attention_flops(b: int, a: int, s: int, d: int) -> AttentionFlops:
    return AttentionFlops(*_sizes(b, a, s, d))


def fraction_of_peak(flops: float, seconds: float, peak_tflops: float) -> float:
    """A kernel's achieved FLOP/s over a given peak, as a fraction, divided where every MFU is
    (`perflab.flops.mfu.utilization`, against the peak as a given basis). Above 100 % the peak is
    wrong for this kernel: an error that says so."""
    from perflab.flops.mfu import spec_basis, utilization

    if not (seconds > 0 and peak_tflops > 0 and flops >= 0) or not math.isfinite(seconds):
        raise InputError("a fraction of the peak needs FLOPs ≥ 0, seconds > 0 and a peak > 0")
    if flops == 0:
        return 0.0
    u = utilization(seconds, {"kernel": flops}, {"kernel": spec_basis(peak_tflops, "kernel", "given", "given peak")})
    if u.mfu is None:
        raise InputError(f"the kernel ran faster than the peak given: {u.suspect}")
    return u.mfu


def summary(b: int, a: int, s: int, d: int, itemsize: int = 2, *, block_m: int = 64, block_n: int = 64,
            causal: bool = False) -> JSON:
    """The predicted figures of one configuration, as one flat dict (what `perflab attention` prints)."""
    fb = flash_bytes(b, a, s, d, itemsize, block_m=block_m, block_n=block_n, causal=causal)
    sb = standard_bytes(b, a, s, d, itemsize)
    fl = step_flops(b, a, s, d, causal)
    return {"batch": b, "heads": a, "seq": s, "head_dim": d, "itemsize": itemsize, "block_m": block_m,
            "block_n": block_n, "causal": bool(causal), "flash_bytes": fb["total"],
            "flash_bytes_closed": flash_bytes_closed(b, a, s, d, itemsize, block_m=block_m, causal=causal),
            "standard_bytes": sb["total"], "standard_scores_bytes": sb["scores"],
            "forward_flops": fl["forward"], "backward_flops_recompute": fl["hardware"] - fl["forward"],
            "model_flops": fl["model"], "hardware_flops": fl["hardware"],
            "flash_intensity": fl["forward"] / fb["total"], "standard_intensity": fl["forward"] / sb["total"]}
