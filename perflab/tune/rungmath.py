"""The arithmetic behind two rungs' explanations, computed rather than typed.

    >>> vocab_padding(50257, 64)["tiles"]          # tile counts across the vocabulary, before and after
    {64: (786, 786), 128: (393, 393), 256: (197, 197)}
    >>> vocab_padding(50257, 64)["row_bytes"]      # one bf16 row of logits (or of the output layer)
    (100514, 100608)
    >>> from perflab.workload.models import preset
    >>> round(checkpoint_cost(preset("gpt2-small"), 1, 1024).step_increase, 3)   # GPT-2 small
    0.173

* **Padding the vocabulary** (rung `vocab64`) does not fill whole tiles: 50,257 → 50,304 leaves the
  number of 64-, 128- and 256-wide tiles across the vocabulary unchanged. What it changes is
  alignment: a bf16 row of 50,257 values is not a multiple of 16 bytes, so the logits GEMM and both
  backward GEMMs that have the vocabulary as a dimension lose the aligned, vectorised paths (NVIDIA,
  *Matrix Multiplication Background User's Guide*, "Tensor Core Requirements";
  `perflab.gemm.shapes.tensor_core_alignment`).
* **Full activation checkpointing** (rung `checkpoint`) runs the forward of every block again in
  the backward: about one more forward, so at most about a third more *step* FLOPs (a step is one
  forward and a backward of twice its FLOPs). The exact count (`perflab.flops.transformer.exact_flops`)
  is smaller: the LM head is outside the blocks and is not recomputed, and torch's non-reentrant
  checkpoint stops before each block's last product.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perflab.core.validate import positive_int

TILE_WIDTHS = (64, 128, 256)
ALIGN_BYTES = 16  # Tensor Core requirement on every dimension's bytes (the guide; lesson 04 §3)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def vocab_padding(vocab: int, multiple: int = 64, *, itemsize: int = 2,
                  widths: tuple[int, ...] = TILE_WIDTHS, align_bytes: int = ALIGN_BYTES) -> dict[str, Any]:
    """What padding `vocab` up to a multiple of `multiple` changes.

    tiles: {width: (tiles across the vocabulary before, after)}; row_bytes: (before, after) for
    `itemsize`-byte values; aligned: (before, after), whether those rows are multiples of
    `align_bytes`; padded: the new size; extra: the share of extra columns.
    """
    vocab = positive_int("vocab", vocab)
    multiple = positive_int("multiple", multiple)
    itemsize = positive_int("itemsize", itemsize)
    padded = _ceil_div(vocab, multiple) * multiple
    before, after = vocab * itemsize, padded * itemsize
    return {
        "vocab": vocab,
        "padded": padded,
        "extra": (padded - vocab) / vocab,
        "tiles": {w: (_ceil_div(vocab, w), _ceil_div(padded, w)) for w in widths},
        "tiles_unchanged": all(_ceil_div(vocab, w) == _ceil_div(padded, w) for w in widths),
        "row_bytes": (before, after),
        "aligned": (before % align_bytes == 0, after % align_bytes == 0),
        "align_bytes": align_bytes,
    }


@dataclass(frozen=True)
class CheckpointCost:
    """What full activation checkpointing adds to one training step (`checkpoint_cost`)."""

    seq: int
    extra_flops: int  # hardware FLOPs recomputed per step
    step_flops: int  # hardware FLOPs of the step without checkpointing
    step_increase: float  # extra_flops / step_flops
    recompute_over_forward: float  # recomputed FLOPs / one forward's
    naive_step_increase: float  # the same were the whole forward run again (1/3)
    logits_share: float  # the LM head's share of the forward
    recomputed: list[str]  # the forward's products that run again, by name
    not_recomputed: list[str]


def checkpoint_cost(cfg, batch: int = 1, seq: int | None = None, *, early_stop: bool = True,
                    fused_attention: bool = True) -> CheckpointCost:
    """What full activation checkpointing (the `checkpoint` rung) adds to one training step of `cfg`
    (a ModelConfig or a preset name), from perflab's exact count (`perflab.flops.transformer`): every
    block's forward runs again in the backward pass, the LM head (outside the blocks) does not.

    early_stop: torch's non-reentrant checkpoint stops recomputing once the last tensor the backward
      needs is back (its default), so each block's last product (the MLP down projection) is not
      redone; False re-runs the whole block.
    fused_attention: the step's attention backward already recomputes the scores (flash-style).

    step_increase: hardware FLOPs with checkpointing / without, minus 1; recompute_over_forward:
    recomputed FLOPs / one forward's; naive_step_increase: the same if the whole forward were run
    again (one forward over forward + backward = 1/3); logits_share: the LM head's share of the
    forward; extra_flops and step_flops (hardware FLOPs without checkpointing); recomputed and
    not_recomputed: the forward's products by name.
    """
    from perflab.flops.transformer import exact_flops
    from perflab.workload.models import preset

    c = preset(cfg) if isinstance(cfg, str) else cfg
    plain = exact_flops(c, batch, seq, checkpointing=False, fused_attention=fused_attention)
    ck = exact_flops(c, batch, seq, checkpointing=True, fused_attention=fused_attention,
                     checkpoint_early_stop=early_stop)
    extra = ck.hardware - plain.hardware
    redone = [k for k, v in ck.recompute.items() if v > plain.recompute.get(k, 0)]
    return CheckpointCost(
        seq=plain.seq,
        extra_flops=extra,
        step_flops=plain.hardware,
        step_increase=extra / plain.hardware,
        recompute_over_forward=(ck.recompute_total - plain.recompute_total) / plain.forward_total,
        naive_step_increase=plain.forward_total / plain.model,
        logits_share=plain.forward.get("logits", 0) / plain.forward_total,
        recomputed=redone,
        not_recomputed=[k for k in plain.forward if k not in redone],
    )


def explain(cfg, multiple: int = 64) -> str:
    """Lesson 11's arithmetic behind two rungs for `cfg` (a ModelConfig): padding its vocabulary to a
    multiple of `multiple` (tiles across it, one bf16 row's bytes and alignment) and full checkpointing
    at its sequence length (the recomputed share of a forward and of a step, the LM head's share)."""
    pad = vocab_padding(cfg.vocab, multiple)
    lines = [f"vocabulary {pad['vocab']:,} → {pad['padded']:,} (+{pad['extra']:.2%} columns)"]
    lines += [f"  {w}-wide tiles across it: {before} → {after}" for w, (before, after) in pad["tiles"].items()]
    lines.append(f"  one bf16 row: {pad['row_bytes'][0]:,} → {pad['row_bytes'][1]:,} bytes; "
                 f"a multiple of {pad['align_bytes']} bytes: {pad['aligned'][0]} → {pad['aligned'][1]}")
    ck = checkpoint_cost(cfg, 1, cfg.seq_len)
    lines.append(f"full checkpointing, {cfg.name} at sequence {cfg.seq_len}: recomputes {ck.recompute_over_forward:.0%} "
                 f"of a forward, {ck.step_increase:+.0%} FLOPs per step (a whole extra forward: "
                 f"{ck.naive_step_increase:+.0%}); the LM head, {ck.logits_share:.0%} of the forward, is not recomputed")
    return "\n".join(lines)
