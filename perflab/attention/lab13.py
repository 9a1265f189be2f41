"""Checks for labs/13_attention.ipynb: write FlashAttention's online-softmax update for one K/V block.

The learner writes two functions, in plain PyTorch, mirroring the Triton kernel's loop body
(`perflab.gemm.triton_kernels.flash_attention_fwd_kernel`):

* `init_state(rows, d)` → (m, l, acc): the running row maximum, running sum and accumulator of a
  tile of `rows` queries, before any key is seen;
* `update(q, k, v, m, l, acc, *, q_start, k_start, seq_len, causal)` → (m, l, acc): fold one
  block of keys and values into the state. q is [rows, d] (queries q_start, q_start+1, ...), k and
  v are [cols, d] (keys k_start, ...); rows of k and v at or past seq_len are padding (garbage) and
  must not count; with `causal`, query i sees keys 0..i.

The grader (`forward`) runs the loop the kernel runs — init, update over every K/V block, then
O = acc / l — on shapes the learner never sees (odd lengths, both head dims, causal and not,
scores far below zero, long uniform rows), and compares O with torch's scaled_dot_product_attention.
Each plausible mistake (the mutants of tests/labs/test_lab13.py: accumulator or running sum not
rescaled, maximum started at 0, causal mask off by one, 1/d for 1/√d, fp16 accumulation, the last
partial block unmasked, no guard for a row that has seen no key yet, padded values not zeroed, P
not rounded to V's dtype) is named with a hint: targeted probes first, then the hidden cases. The
padding past seq_len holds garbage, NaN and inf among it, as memory past a tensor can; one hidden
case feeds the blocks last to first, as kernels that visit the diagonal block first do, so a row
meets a block it sees none of before any it sees.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from perflab.grading.checks import NOT_DONE, LabCheckError, attempt, fail, record

NAME = "online softmax update"

# Hidden cases: (b·a flattened to one head here) seq, d, causal, dtype, block_m, block_n, how inputs are drawn
CASES: list[dict[str, Any]] = [
    dict(s=77, d=64, causal=False, dtype="fp16", block_m=32, block_n=16, kind="normal", seed=1),
    dict(s=77, d=64, causal=True, dtype="fp16", block_m=32, block_n=16, kind="normal", seed=2),
    dict(s=50, d=128, causal=True, dtype="bf16", block_m=16, block_n=32, kind="normal", seed=3),
    dict(s=93, d=64, causal=False, dtype="fp16", block_m=16, block_n=16, kind="negative", seed=4),
    dict(s=1800, d=64, causal=False, dtype="fp16", block_m=512, block_n=512, kind="uniform", seed=5),
    dict(s=61, d=64, causal=True, dtype="bf16", block_m=32, block_n=16, kind="normal", seed=6, order="reverse"),
]
VISIBLE = dict(s=40, d=64, causal=True, dtype="fp16", block_m=16, block_n=16, kind="normal", seed=0)


def _torch_dtype(name: str):
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[name]


def make_inputs(case: dict[str, Any]):
    """q, k, v of one head, [s, d], in the case's dtype.

    'normal': N(0, 1). 'negative': every key ≈ u and every query −20·u, so all scores are
    ≈ −20·|u|²/√d ≈ −160: far below 0 (an fp32 exp of them underflows to 0 unless the row maximum is
    subtracted). 'uniform': q = 0 (every score 0, attention a plain mean) and V around 50, so the
    unnormalised Σ exp(s − m)·V reaches s·50 = 90,000, over fp16's largest value 65504."""
    import torch

    g = torch.Generator().manual_seed(case["seed"])
    s, d = case["s"], case["d"]
    dt = _torch_dtype(case["dtype"])
    if case["kind"] == "negative":
        u = torch.randn(d, generator=g)
        k = u.expand(s, d).clone() + 0.01 * torch.randn(s, d, generator=g)
        q = (-20 * u).expand(s, d).clone()
        v = torch.randn(s, d, generator=g)
    elif case["kind"] == "uniform":
        q = torch.zeros(s, d)
        k = torch.randn(s, d, generator=g)
        v = 50 + torch.randn(s, d, generator=g)
    else:
        q, k, v = (torch.randn(s, d, generator=g) for _ in range(3))
    return q.to(dt), k.to(dt), v.to(dt)


def reference(q, k, v, causal: bool):
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q.float()[None], k.float()[None], v.float()[None], is_causal=causal)[0]


def _garbage(rows: int, d: int, dtype, g, special: bool):
    """What lies past a tensor's end: large random values and, with `special`, NaN and ±inf among them."""
    import torch

    x = 10 * torch.randn(rows, d, generator=g)
    if special and rows:
        x[0, 0], x[-1, -1], x[rows // 2, d // 2] = math.nan, math.inf, -math.inf
    return x.to(dtype)


def forward(init_state: Callable[..., Any], update: Callable[..., Any], q, k, v, *, causal: bool, block_m: int,
            block_n: int, order: str = "forward"):
    """The kernel's loop in PyTorch with the learner's two functions: O (fp32), [s, d].

    K and V blocks are padded to block_n rows with garbage past seq_len, as a kernel's unmasked load
    would read whatever lies beyond the tensor (V's with NaN and inf in it: a kernel loads V's padding
    as 0, so 0·garbage never reaches acc). `order="reverse"` feeds each tile's blocks last to first."""
    import torch

    if order not in ("forward", "reverse"):
        raise ValueError(f"order must be 'forward' or 'reverse', got {order!r}")
    s, d = q.shape
    out = torch.empty(s, d, dtype=torch.float32)
    g = torch.Generator().manual_seed(1234)
    pad = -(-s // block_n) * block_n - s
    kp = torch.cat([k, _garbage(pad, d, k.dtype, g, special=False)]) if pad else k
    vp = torch.cat([v, _garbage(pad, d, v.dtype, g, special=True)]) if pad else v
    for qs in range(0, s, block_m):
        qt = q[qs: qs + block_m]
        state = init_state(qt.shape[0], d)
        if state is None or len(state) != 3:
            raise LabCheckError(f"{NAME}: init_state must return (m, l, acc)")
        m, lsum, acc = state
        hi = min(s, qs + qt.shape[0]) if causal else s
        starts = list(range(0, hi, block_n))
        for ks in reversed(starts) if order == "reverse" else starts:
            res = update(qt, kp[ks: ks + block_n], vp[ks: ks + block_n], m, lsum, acc, q_start=qs, k_start=ks,
                         seq_len=s, causal=causal)
            if res is None or len(res) != 3:
                raise LabCheckError(f"{NAME}: update must return the new (m, l, acc)")
            m, lsum, acc = res
        out[qs: qs + qt.shape[0]] = (acc.float() / lsum.float()[:, None])
    return out


def tolerance(dtype: str) -> float:
    """|O − SDPA| allowed: P rounded to the input dtype before P·V costs a few units of its rounding."""
    return {"fp16": 8 * 2.0 ** -11, "bf16": 8 * 2.0 ** -8, "fp32": 1e-5}[dtype]


HINTS = {
    "nan": "some outputs are NaN or inf. If every score of a row is far below 0, exp(score − m) must not "
           "underflow for all of them: start the running maximum at −inf, not 0 (then the first block sets it). "
           "If the accumulator overflows, keep it in fp32",
    "dtype": "your state is not float32. The accumulator and the running sum must be fp32 whatever the inputs are: "
             "Σ exp(s − m)·V over thousands of keys exceeds fp16's 65504, and fp16 rounds away small terms",
}


def _diagnose(errors: list[tuple[dict[str, Any], float, bool]]) -> str:
    """The hint for a wrong answer, from which hidden cases failed."""
    kinds = {c["kind"] for c, _, ok in errors if not ok}
    if kinds == {"uniform"}:
        return ("right on short rows, wrong on a long one (1800 keys, values ≈ 50): keep the accumulator and the "
                "running sum in fp32; Σ exp(s − m)·V reaches 90,000, over fp16's 65504")
    if kinds == {"negative"}:
        return ("wrong only when every score is far below 0: the running maximum must start at −inf, not 0 "
                "(exp(score − 0) underflows to 0 and the row sums to 0)")
    return ("compare your update with the online softmax: m_new = max(m, rowmax(S)); α = exp(m − m_new); "
            "l = α·l + rowsum(P); acc = α·acc + P·V, with S = q·kᵀ/√d and masked entries set to −inf")


def _probe(update, init_state) -> str | None:
    """Targeted probes that name one mistake each (run before the generic hint)."""
    import torch

    d = 64
    g = torch.Generator().manual_seed(7)
    q = torch.randn(4, d, generator=g).half()
    k = torch.randn(8, d, generator=g).half()
    v = torch.randn(8, d, generator=g).half()
    m, lsum, acc = init_state(4, d)
    if not (isinstance(acc, torch.Tensor) and acc.dtype == torch.float32 and isinstance(lsum, torch.Tensor)
            and lsum.dtype == torch.float32):
        return HINTS["dtype"]
    if isinstance(m, torch.Tensor) and torch.isfinite(m).any():
        return ("init_state: the running maximum starts finite (e.g. 0). Start it at −inf: with 0, a row whose "
                "scores are all far below 0 gets exp(score − 0) = 0 for every key and divides 0 by 0")
    # scale: one key, two values; the weight of key 0 vs key 1 depends on 1/√d
    m1, l1, a1 = update(q, k, v, m, lsum, acc, q_start=0, k_start=0, seq_len=8, causal=False)
    if not (isinstance(a1, torch.Tensor) and a1.dtype == torch.float32):
        return HINTS["dtype"]
    sc = (q.float() @ k.float().T)
    for name, scale in (("1/d", 1 / d), ("1 (no scale)", 1.0)):
        mm = (sc * scale).max(-1).values
        if torch.allclose(m1.float(), mm, atol=1e-3) and not torch.allclose(mm, (sc / math.sqrt(d)).max(-1).values):
            return f"your scores are scaled by {name}: scaled dot-product attention divides q·kᵀ by √d, not d"
    # a row that has seen no key yet: a block it sees none of (causal, all keys after it), first
    m0, l0, a0 = init_state(4, d)
    mz, lz, az = update(q, k, v, m0, l0, a0, q_start=0, k_start=8, seq_len=16, causal=True)
    if not (torch.isfinite(lz).all() and torch.isfinite(az).all()):
        return ("a row that has seen no key yet (every score of this block masked) gets NaN: m and m_new are both "
                "−inf there, and exp(−inf − (−inf)) is NaN. Guard it: subtract 0 instead of m_new where m_new is −inf")
    # padding past seq_len: its values may be NaN or inf, and 0·NaN is NaN
    vn = v.clone()
    vn[5:] = math.nan
    m0, l0, a0 = init_state(4, d)
    _, _, an = update(q, k, vn, m0, l0, a0, q_start=0, k_start=0, seq_len=5, causal=False)
    if not torch.isfinite(an).all():
        return ("the padded rows of V (at or past seq_len) hold garbage, NaN among it, and 0·NaN is NaN: zero "
                "those rows of V before P·V, as the kernel's masked load does (other=0)")
    # P rounded to V's dtype before P·V, as the kernel's tl.dot takes it (the sum stays fp32)
    qb = torch.zeros(1, d, dtype=torch.bfloat16)
    qb[0, 0] = 1.0
    kb = torch.zeros(2, d, dtype=torch.bfloat16)
    kb[0, 0] = -9.6  # a score near −1.2, whose exp (about 0.30) bf16 rounds by about 6e-4
    vb = torch.zeros(2, d, dtype=torch.bfloat16)
    vb[0] = 1.0
    m0, l0, a0 = init_state(1, d)
    _, _, ar = update(qb, kb, vb, m0, l0, a0, q_start=0, k_start=0, seq_len=2, causal=False)
    sb = (qb.float() @ kb.float().T) / math.sqrt(d)
    pb = torch.exp(sb - sb.max(-1, keepdim=True).values)
    want = (pb.to(torch.bfloat16).float() @ vb.float())[0, 0]
    if abs(float(ar[0, 0]) - float(want)) > 1e-6 and abs(float(ar[0, 0]) - float((pb @ vb.float())[0, 0])) <= 1e-6:
        return ("P is not rounded to V's dtype before P·V: the kernel's tl.dot takes P in V's dtype (fp16 or bf16) "
                "and sums in fp32; round P with p.to(v.dtype) before the product")
    # causal off by one: query 0 must see key 0 and only key 0
    m0, l0, a0 = init_state(4, d)
    mc, lc, ac = update(q, k, v, m0, l0, a0, q_start=0, k_start=0, seq_len=8, causal=True)
    o = ac / lc[:, None]
    if not torch.allclose(o[0], v[0].float(), atol=1e-2):
        return ("causal mask off by one: query i sees keys 0..i (its own position included); "
                "keep j ≤ i (mask j > i), not j < i")
    if torch.allclose(o[1], v[0].float(), atol=1e-2):
        return "causal mask off by one: query 1 must also see key 1 (keep j ≤ i, not j < i)"
    # last partial block: rows past seq_len must not count
    m0, l0, a0 = init_state(4, d)
    mp, lp, ap = update(q, k, v, m0, l0, a0, q_start=0, k_start=0, seq_len=5, causal=False)
    if (lp.float() - torch.exp(sc[:, :5] / math.sqrt(d) - mp[:, None].float()).sum(-1)).abs().max() > 1e-2:
        return ("keys at or past seq_len are padding in the last block: mask them (score −inf) so they add "
                "nothing to l or acc")
    # rescaling: a second block whose scores are larger must shrink the old sum and accumulator
    q2 = torch.randn(4, d, generator=g).half()
    k_small = (0.1 * torch.randn(8, d, generator=g)).half()
    k_big = (2 * q2.float()).half().repeat(2, 1)
    m0, l0, a0 = init_state(4, d)
    ma, la, aa = update(q2, k_small, v, m0, l0, a0, q_start=0, k_start=0, seq_len=16, causal=False)
    mb, lb, ab = update(q2, k_big, v, ma.clone(), la.clone(), aa.clone(), q_start=0, k_start=8, seq_len=16,
                        causal=False)
    kk = torch.cat([k_small, k_big]).float()
    vv = torch.cat([v, v]).float()
    ss = q2.float() @ kk.T / math.sqrt(d)
    mt = ss.max(-1).values
    pt = torch.exp(ss - mt[:, None])
    l_true, acc_true = pt.sum(-1), pt @ vv
    l_ok = torch.allclose(lb.float(), l_true, rtol=1e-2, atol=1e-2)
    acc_ok = torch.allclose(ab.float(), acc_true, rtol=1e-2, atol=5e-2)
    if not l_ok and acc_ok:
        return ("the running sum is not rescaled: when the maximum grows from m to m_new, the old l was summed "
                "against m and must be multiplied by α = exp(m − m_new) before adding this block's row sums")
    if l_ok and not acc_ok:
        return ("the accumulator is not rescaled: when the maximum grows from m to m_new, multiply the old acc "
                "by α = exp(m − m_new) before adding P·V")
    return None


def check_online_softmax(init_state: Callable[..., Any], update: Callable[..., Any],
                         cases: list[dict[str, Any]] | None = None, *, probes: bool = True):
    """Run the learner's loop on the hidden cases (`cases`, default CASES) against SDPA; raise
    LabCheckError with a hint if wrong. `probes=False` leaves out the targeted probes that name one
    mistake each before the hidden cases run (the tests check the hidden cases alone catch them)."""
    import torch

    got = attempt(NAME, init_state, 4, 64)
    if got is NOT_DONE:
        return record(NAME, False)
    q, k, v = make_inputs(VISIBLE)
    if attempt(NAME, update, q[:4], k[:4], v[:4], *got, q_start=0, k_start=0, seq_len=4, causal=False) is NOT_DONE:
        return record(NAME, False)
    hint = _probe(update, init_state) if probes else None
    if hint:
        raise fail(NAME, hint)
    results = []
    worst = None
    cases = CASES if cases is None else cases
    for case in cases:
        q, k, v = make_inputs(case)
        o = forward(init_state, update, q, k, v, causal=case["causal"], block_m=case["block_m"],
                    block_n=case["block_n"], order=case.get("order", "forward"))
        ref = reference(q, k, v, case["causal"])
        err = float((o - ref).abs().max()) if torch.isfinite(o).all() else math.inf
        ok = err <= tolerance(case["dtype"])
        results.append((case, err, ok))
        if not ok and worst is None:
            worst = (case, err)
    if worst is not None:
        case, err = worst
        where = (f"seq {case['s']}, d {case['d']}, {'causal' if case['causal'] else 'not causal'}, {case['dtype']}, "
                 f"blocks {case['block_m']}×{case['block_n']}"
                 + (", blocks fed last to first" if case.get("order") == "reverse" else ""))
        shown = "NaN or inf" if math.isinf(err) else f"{err:.3g}"
        raise fail(NAME, f"on a hidden case ({where}) your O differs from SDPA's by {shown} (allowed "
                         f"{tolerance(case['dtype']):.3g}). Hint: {_diagnose(results)}")
    print(f"✓ {NAME}: matches scaled_dot_product_attention on {len(cases)} hidden cases")
    return record(NAME, True)


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
LEARNER_ANSWERS = ("init_state", "update")
REFERENCES = {"online_softmax": reference}
FORBIDDEN = (reference, forward)


def grading_inputs(rng) -> list[dict[str, Any]]:
    """Cases drawn per learner, beside the lab's own: odd lengths, both head dimensions, causal and
    not, fp16 and bf16, tile sizes that do not divide the length."""
    out = []
    for _ in range(3):
        out.append(dict(s=2 * rng.randint(16, 150) + 1, d=rng.choice((64, 128)), causal=rng.random() < 0.5,
                        dtype=rng.choice(("fp16", "bf16")), block_m=rng.choice((16, 32, 64)),
                        block_n=rng.choice((16, 32, 64)), kind=rng.choice(("normal", "negative")),
                        seed=rng.randint(10, 10**6)))
    return out


def judge(answers, rng) -> None:
    check_online_softmax(answers["init_state"], answers["update"], CASES + grading_inputs(rng))
