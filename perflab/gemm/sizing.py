"""The model-sizing checklist (Anthony et al. 2024, restated in Bekman's ML Engineering book): a
config's vocabulary, batch × sequence, head and tensor-parallel sizes, and SwiGLU width, checked item by
item with the reason (lesson 04, `perflab sizing`). `perflab.gemm.shapes` re-exports every name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perflab.core.errors import InputError
from perflab.core.validate import positive_int
from perflab.gemm.alignment import nearest_multiples
from perflab.gemm.waves import ceil_div


def largest_pow2_divisor(x: int) -> int:
    """The largest power of two dividing x (x > 0): 4096 → 4096, 80 → 16, 50257 → 1."""
    x = positive_int("x", x)
    return x & -x


def pad_to_multiple(x: int, multiple: int) -> int:
    """x rounded up to a multiple of `multiple`: 50257 → 50304 for 64."""
    return ceil_div(positive_int("x", x), positive_int("multiple", multiple)) * multiple


@dataclass(frozen=True)
class CheckItem:
    rule: str
    ok: bool | None  # None: advice that a config cannot pass or fail
    detail: str

    @property
    def verdict(self) -> str:
        return {True: "pass", False: "FAIL", None: "note"}[self.ok]


CHECKLIST_SOURCE = ("Anthony et al., 'The Case for Co-Designing Model Architectures with Hardware' (arXiv:2401.14489), "
                    "summary of recommendations; restated in Stas Bekman, 'Machine Learning Engineering Open Book', "
                    "training/performance/README.md, 'Vector and matrix size divisibility → Final recommendations for "
                    "model sizing' (https://github.com/stas00/ml-engineering/tree/master/training/performance)")


VOCAB_MULTIPLE = 64  # each rank's slice of the output layer, n = V/t, a multiple of 64
MEGATRON_VOCAB_MULTIPLE = 128  # Megatron-LM's default --make-vocab-size-divisible-by, times t
VOCAB_SOURCE = ("Megatron-LM, megatron/training/tokenizer/tokenizer.py, _vocab_size_with_padding: the vocabulary is "
                "padded to a multiple of make_vocab_size_divisible_by × tensor_model_parallel_size "
                "(--make-vocab-size-divisible-by defaults to 128 in megatron/training/arguments.py)")


def vocab_rule(t: int = 1) -> str:
    """The vocabulary rule's name for tensor-parallel degree `t`: 'vocab % 64 == 0' without tensor
    parallelism, 'vocab % (64·t) == 0' with it."""
    return "vocab % 64 == 0" if positive_int("t", t) == 1 else "vocab % (64·t) == 0"


def vocab_item(vocab: int, t: int = 1) -> CheckItem:
    """The vocabulary rule for a vocab-parallel output layer: each of the t ranks multiplies by its own
    V/t columns, so its GEMM's n is V/t, and V/t must be a multiple of 64: V % (64·t) == 0. Megatron-LM
    pads the vocabulary to a multiple of 128·t for the same reason (`VOCAB_SOURCE`)."""
    vocab, t = positive_int("vocab", vocab), positive_int("t", t)
    multiple = VOCAB_MULTIPLE * t
    rule = vocab_rule(t)
    if t == 1:
        if vocab % multiple == 0:
            return CheckItem(rule, True, f"V={vocab} = 64 × {vocab // 64}")
        return CheckItem(rule, False, f"V={vocab} leaves remainder {vocab % 64}: pad the vocabulary to "
                                      f"{pad_to_multiple(vocab, 64)}")
    if vocab % multiple == 0:
        return CheckItem(rule, True, f"V/t = {vocab}/{t} = {vocab // t} = 64 × {vocab // multiple}: each rank's "
                                     "output GEMM has n = V/t")
    per_rank = f"V/t = {vocab}/{t} = {vocab // t} is not a multiple of 64" if vocab % t == 0 else \
        f"V/t = {vocab}/{t} is not whole"
    return CheckItem(rule, False, f"{per_rank}: pad V to {pad_to_multiple(vocab, multiple)} (64·t = {multiple}); "
                                  f"Megatron-LM pads to {pad_to_multiple(vocab, MEGATRON_VOCAB_MULTIPLE * t)} (128·t)")


def sizing_checklist(*, vocab: int, b: int, s: int, h: int, a: int, t: int = 1, d_ff: int | None = None,
                     pow2: int = 64, max_t: int = 8) -> list[CheckItem]:
    """The model-sizing checklist applied to one config, item by item, with the reason.

    1. V % (64·t) == 0 (the vocabulary is the n of the output layer's GEMM, split over the t
       tensor-parallel ranks: `vocab_item`);
    2. b·s, h/a and h/t divisible by a high power of two (at least `pow2`, default 64);
    3. (b·a)/t an integer (heads split evenly over tensor-parallel ranks, per micro-batch);
    4. t small (≤ `max_t`: tensor parallelism inside one 8-GPU node);
    5. the micro-batch as large as memory allows (advice, not checkable from a config);
    6. with SwiGLU, a d_ff near 8/3·h that is a multiple of 64 (search with `perflab swiglu`).
    """
    vocab, b, s, h, a, t = (positive_int(nm, v) for nm, v in
                            (("vocab", vocab), ("b", b), ("s", s), ("h", h), ("a", a), ("t", t)))
    pow2 = positive_int("pow2", pow2)
    if pow2 & (pow2 - 1):
        raise InputError(f"pow2={pow2} must be a power of two (e.g. 64)")
    items = [vocab_item(vocab, t)]

    def pow2_item(label: str, value: int | None, why_not: str | None = None) -> CheckItem:
        rule = f"{label} divisible by {pow2}"
        if value is None:
            return CheckItem(rule, False, why_not or "")
        p = largest_pow2_divisor(value)
        if p >= pow2:
            return CheckItem(rule, True, f"{label} = {value} = {p} × {value // p}")
        lo, hi = nearest_multiples(value, pow2)
        return CheckItem(rule, False, f"{label} = {value} is divisible only by {p}: aim for a multiple of {pow2} "
                                      f"(nearest: {lo} or {hi})" if lo != hi else
                         f"{label} = {value} is divisible only by {p}: aim for a multiple of {pow2}")

    items.append(pow2_item("b·s", b * s))
    items.append(pow2_item("h/a", h // a if h % a == 0 else None,
                           f"h={h} is not divisible by a={a}: the head size h/a must be a whole number"))
    items.append(pow2_item("h/t", h // t if h % t == 0 else None,
                           f"h={h} is not divisible by t={t}: each tensor-parallel rank needs a whole share"))
    if (b * a) % t == 0:
        items.append(CheckItem("(b·a)/t is an integer", True, f"(b·a)/t = {b * a}/{t} = {b * a // t}"))
    else:
        items.append(CheckItem("(b·a)/t is an integer", False,
                               f"(b·a)/t = {b * a}/{t} is not whole: choose a (or b) so that t divides b·a"))
    if t == 1:
        items.append(CheckItem(f"t small (≤ {max_t})", True, "t = 1: no tensor parallelism, nothing to communicate"))
    elif t <= max_t:
        items.append(CheckItem(f"t small (≤ {max_t})", True,
                               f"t = {t} stays inside one node; use the smallest t that fits in memory"))
    else:
        items.append(CheckItem(f"t small (≤ {max_t})", False,
                               f"t = {t} spans more than one {max_t}-GPU node: tensor parallelism's all-reduces "
                               "then cross the slow network; use pipeline or data parallelism across nodes"))
    items.append(CheckItem("micro-batch b as large as memory allows", None,
                           "its alignment matters little (b·s is what the GEMMs see), its size matters: "
                           "if 8 runs out of memory and 7 fits, use 7"))
    if d_ff is not None:
        d_ff = positive_int("d_ff", d_ff)
        ratio = d_ff / h
        if d_ff % 64 == 0:
            items.append(CheckItem("SwiGLU d_ff a multiple of 64 near 8/3·h", True,
                                   f"d_ff = {d_ff} = 64 × {d_ff // 64} ({ratio:.4g}·h; 8/3 = 2.667)"))
        else:
            lo, hi = nearest_multiples(d_ff, 64)
            items.append(CheckItem("SwiGLU d_ff a multiple of 64 near 8/3·h", False,
                                   f"d_ff = {d_ff} ({ratio:.4g}·h) is divisible only by {largest_pow2_divisor(d_ff)}: "
                                   f"measure {lo} and {hi} with `perflab swiglu --hidden {h}`"))
    return items


def checklist_frame(items: Sequence[CheckItem]):
    import pandas as pd

    return pd.DataFrame([{"check": i.rule, "verdict": i.verdict, "why": i.detail} for i in items])


def checklist_text(items: Sequence[CheckItem]) -> str:
    width = max(len(i.rule) for i in items)
    return "\n".join(f"[{i.verdict:>4}] {i.rule:<{width}}  {i.detail}" for i in items)


@dataclass(frozen=True)
class Checklists:
    """The checklist applied to several models' shapes at one setting of b, s and t (lesson 04)."""

    b: int
    s: int
    t: int
    models: tuple[tuple[str, tuple[CheckItem, ...]], ...]  # (model, its items)

    def failed(self, model: str) -> list[str]:
        """The rules `model` fails."""
        return [i.rule for name, items in self.models if name == model for i in items if i.ok is False]

    def table(self, notes: bool = False):
        """One row per model and check: the verdict and why (advice that cannot pass or fail left out
        unless `notes`)."""
        import pandas as pd

        rows = [{"model": name, "check": i.rule, "verdict": i.verdict, "why": i.detail}
                for name, items in self.models for i in items if notes or i.ok is not None]
        return pd.DataFrame(rows).set_index(["model", "check"])


def checklists(configs: Sequence[dict], *, b: int, s: int, t: int = 1) -> Checklists:
    """`sizing_checklist` for every config (rows with 'model', 'vocab', 'hidden', 'heads' and 'd_ff', as in
    perflab/gemm/data/published_shapes.json's 'model_configs') at micro-batch b, sequence s and
    tensor-parallel degree t."""
    return Checklists(b, s, t, tuple((c["model"], tuple(sizing_checklist(
        vocab=c["vocab"], b=b, s=s, h=c["hidden"], a=c["heads"], t=t, d_ff=c.get("d_ff")))) for c in configs))
