"""`perflab sizing`: the model-sizing checklist applied to a transformer config."""

from __future__ import annotations

from perflab.commands._args import emit, positive_int


def register(sub) -> None:
    p = sub.add_parser("sizing", help="check a transformer's shapes against the sizing checklist (pass/fail, why)")
    p.add_argument("--vocab", type=positive_int, required=True, help="vocabulary size V")
    p.add_argument("--b", type=positive_int, required=True, help="micro-batch size")
    p.add_argument("--s", type=positive_int, required=True, help="sequence length")
    p.add_argument("--h", type=positive_int, required=True, help="hidden size")
    p.add_argument("--a", type=positive_int, required=True, help="attention heads")
    p.add_argument("--t", type=positive_int, default=1, help="tensor-parallel degree (default 1)")
    p.add_argument("--d-ff", type=positive_int, help="SwiGLU MLP width, if the model has one")
    p.add_argument("--pow2", type=positive_int, default=64, help="the power of two b·s, h/a, h/t should be divisible by (default 64)")
    p.add_argument("--json", action="store_true", help="print JSON: {checks: [{rule, verdict, why}], failed: N}")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.gemm.shapes import CHECKLIST_SOURCE, checklist_text, sizing_checklist

    items = sizing_checklist(vocab=args.vocab, b=args.b, s=args.s, h=args.h, a=args.a, t=args.t, d_ff=args.d_ff,
                             pow2=args.pow2)
    failed = sum(1 for i in items if i.ok is False)
    out = {"checks": [{"rule": i.rule, "verdict": i.verdict, "why": i.detail} for i in items], "failed": failed,
           "source": CHECKLIST_SOURCE}
    emit(out, args.json, checklist_text(items) + f"\n{failed} check(s) failed. Source: {CHECKLIST_SOURCE}")
    return 0
