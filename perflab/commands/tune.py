"""`perflab tune`: the capstone ladder: apply rungs to one training step, measure each, keep parity."""

from __future__ import annotations

from perflab.commands._args import emit, positive_int


def register(sub) -> None:
    p = sub.add_parser("tune", help="make one training step fast, rung by rung (lesson 11): time, MFU/HFU, memory, parity")
    p.add_argument("--preset", default=None,
                   help="cpu (a GPT-2-shaped model at CPU size), gpu (GPT-2 small) or smoke; default: gpu on a CUDA "
                        "device, cpu elsewhere")
    p.add_argument("--rungs", default=None,
                   help="comma-separated rungs, applied in this order after the baseline (default: all): "
                        "baseline,bf16,adamw,vocab64,sdpa,compile,batch,checkpoint,loader,numa")
    p.add_argument("--steps", type=positive_int, default=None, help="at least this many interleaved pairs of steps per rung (default: the preset's; "
                        "at least 6: two blocks of 3 pairs, and 5 for a 90 %% interval)")
    p.add_argument("--batch", type=positive_int, default=None,
                   help="the global batch in sequences per optimizer step (default: the preset's)")
    p.add_argument("--fresh", action="store_true", help="measure every rung again (the saved rows are set aside)")
    p.add_argument("--json", action="store_true",
                   help="print JSON: {preset, device, rows: [{rung, step_s, tokens_per_s, mfu, hfu, peak_bytes, "
                        "loss_delta, speedup_vs_baseline, verdict, verdict_reason, quietness, blocks, ...}], stopped, "
                        "fastest}")
    p.set_defaults(func=run)


def text_table(res) -> str:
    from perflab.core.readout import mib, num, percent, seconds

    head = ("rung", "step_s", "tokens_per_s", "mfu", "hfu", "peak_bytes", "loss_delta", "speedup_vs_previous",
            "speedup_vs_baseline", "verdict")
    rows: list[tuple[str, ...]] = [head]
    for r in res.rows:
        mark = r.get("verdict") or ("adopted" if r.get("adopted") else
                                    ("n/a" if not r.get("applicable", True) else "kept out"))
        if r.get("busy"):
            mark += " (machine busy)"
        iv = r.get("interval")
        prev = f"{r.get('speedup_vs_previous', 1.0):.2f}×" + (
            f" ({iv[0]:.2f}–{iv[1]:.2f})" if iv and r.get("measured") and iv[1] != float("inf") else "")
        rows.append((r["rung"], seconds(r["step_s"]), num(r["tokens_per_s"]), percent(r["mfu"]), percent(r["hfu"]),
                     mib(r["peak_bytes"]), f"{r['loss_delta']:+.1e}", prev, f"{r['speedup_vs_baseline']:.2f}×", mark))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    basis = res.basis() if hasattr(res, "basis") else res.rows[0].get("mfu_basis", "")
    lines.append(f"MFU/HFU against the {basis}; loss after {len(res.rows[0]['losses'])} steps vs the baseline's")
    try:
        from perflab.tune.verdict import rule

        lines.append(f"verdict: {rule()}")
    except ImportError:  # pragma: no cover
        pass
    for r in res.rows:
        lines.append(f"  {r['rung']:<10} ({r['lesson']}): {r['note']}" + (f" — {r['explain']}" if r.get("explain") else ""))
    f = res.fastest
    lines.append(f"fastest: {f['rung']} at {f['speedup_vs_baseline']:.2f}× the baseline; results in {res.path}")
    if res.resumed:
        lines.append(f"{res.resumed} rung(s) taken from earlier runs (shared with lesson 11 and lab 11): --fresh "
                     "measures them again")
    if res.stopped:
        lines.append(f"STOPPED: {res.stopped}")
    return "\n".join(lines)


def run(args) -> int:
    import torch

    from perflab.tune.ladder import default_preset
    from perflab.tune.runner import run_ladder

    name = args.preset or default_preset("cuda" if torch.cuda.is_available() else "cpu")
    res = run_ladder(name, args.rungs, steps=args.steps, batch=args.batch, fresh=args.fresh, progress=not args.json)
    out = res.as_dict()
    emit(out, args.json, text_table(res))
    return 1 if res.stopped and "broke parity" in res.stopped else 0
