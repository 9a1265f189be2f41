"""`perflab attention`: lesson 13's FlashAttention kernel: its bytes predicted and counted, FLOPs, what the
compiler made of it, and (with --run) its error against SDPA."""

from __future__ import annotations

from typing import Any

from perflab.commands._args import emit, positive_int


def register(sub) -> None:
    p = sub.add_parser("attention", help="FlashAttention in Triton: predicted and counted bytes (fused and eager), "
                                         "FLOPs, registers/shared memory/occupancy for sm_80/sm_90, error vs SDPA",
                       description="Lesson 13's FlashAttention forward (Triton, FlashAttention-2's loop order) for one "
                                   "shape: the bytes it moves, predicted by formula and counted over every masked "
                                   "load and store in Triton's interpreter, beside eager attention's; its forward and "
                                   "backward FLOPs; what the compiler made of it for an A100 (sm_80) or an H100 "
                                   "(sm_90), with no GPU needed; and with --run its error against PyTorch's "
                                   "scaled_dot_product_attention.")
    p.add_argument("--seq", type=positive_int, default=256, help="sequence length s (default 256)")
    p.add_argument("--head-dim", type=positive_int, default=64, help="head dimension d: 64 or 128 (default 64)")
    p.add_argument("--heads", type=positive_int, default=2, help="heads a (default 2)")
    p.add_argument("--batch", type=positive_int, default=1, help="batch b (default 1)")
    p.add_argument("--causal", action="store_true", help="a causal mask (query i sees keys 0..i)")
    p.add_argument("--block-m", type=positive_int, default=64, help="BLOCK_M, queries per program (default 64)")
    p.add_argument("--block-n", type=positive_int, default=64, help="BLOCK_N, keys per K/V block (default 64)")
    p.add_argument("--dtype", default="fp16", metavar="{fp16,bf16}",
                   help="the inputs' type: fp16 or bf16 (default fp16); the kernel accumulates in fp32 either way")
    p.add_argument("--target", default="sm_90", metavar="{sm_90,sm_80}",
                   help="compile for sm_90 (H100) or sm_80 (A100), the GPUs whose limits perflab knows (default sm_90)")
    p.add_argument("--warps", type=positive_int, default=4, help="num_warps of the compiled kernel (default 4)")
    p.add_argument("--stages", type=positive_int, default=2, help="num_stages of the compiled kernel (default 2)")
    p.add_argument("--no-compile", action="store_true", help="skip compiling (bytes and FLOPs only)")
    p.add_argument("--run", action="store_true", help="also run the kernel (Triton's interpreter on a CPU) and "
                                                      "report max_abs_err against scaled_dot_product_attention")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.attention import compiled, flash
    from perflab.attention import formulas as io
    from perflab.core.errors import InputError, UnsupportedError
    from perflab.core.readout import nbytes, num
    from perflab.gemm import triton_matmul as tm

    b, a, s, d = args.batch, args.heads, args.seq, args.head_dim
    flash.check_head_dim(d)
    flash.check_blocks(args.block_m, args.block_n)
    dtype = tm.dtype_name(args.dtype)
    if dtype == "fp32":
        raise InputError("--dtype fp32: the kernel's inputs are fp16 or bf16 (Tensor Core operands); fp32 accumulates")
    from perflab.gemm.compiled import parse_target
    from perflab.gemm.occupancy import TARGET_GPU

    if not args.no_compile and f"sm_{parse_target(args.target)}" not in TARGET_GPU:
        raise InputError(f"--target {args.target}: perflab knows the limits of {' and '.join(sorted(TARGET_GPU))} "
                         f"only ({', '.join(f'{k}: {v}' for k, v in sorted(TARGET_GPU.items()))})")
    item = flash.tm_itemsize(dtype)
    out: dict[str, Any] = io.summary(b, a, s, d, item, block_m=args.block_m, block_n=args.block_n, causal=args.causal)
    out["dtype"] = dtype
    lines = [f"attention b={b} a={a} s={s} d={d} {dtype}{' causal' if args.causal else ''}, "
             f"tiles {args.block_m}×{args.block_n}"]
    reason = tm.unavailable_reason()
    small = b * a * s * d <= flash.INTERPRETER_MAX_ELEMENTS
    if reason is None and small:
        c = flash.count_bytes(b, a, s, d, dtype, causal=args.causal, block_m=args.block_m, block_n=args.block_n)
        out["flash_bytes_counted"] = c.total
    else:
        out["flash_bytes_counted"] = None
        out["flash_count_skipped"] = reason or ("too large to count in the interpreter here (b·a·s·d over "
                                                f"{flash.INTERPRETER_MAX_ELEMENTS:,})")
    out["eager_bytes_counted"] = flash.count_eager_bytes(b, a, s, d, dtype, causal=args.causal).total
    lines.append(f"fused (FlashAttention): predicted {nbytes(out['flash_bytes'])}"
                 + (f", counted {nbytes(out['flash_bytes_counted'])} (every tl.load/tl.store in the interpreter)"
                    if out["flash_bytes_counted"] is not None else f", not counted: {out['flash_count_skipped']}"))
    lines.append(f"standard: predicted {nbytes(out['standard_bytes'])} (s×s scores and probabilities: "
                 f"{nbytes(out['standard_scores_bytes'])})"
                 + f", eager PyTorch counted {nbytes(out['eager_bytes_counted'])} (each operator's inputs and outputs)")
    lines.append(f"FLOPs: forward {num(out['forward_flops'])} FLOPs, backward with recompute "
                 f"{num(out['backward_flops_recompute'])} FLOPs (2.5×); a step: model {num(out['model_flops'])} FLOPs "
                 f"(MFU counts these), hardware {num(out['hardware_flops'])} FLOPs (HFU)")
    if not args.no_compile:
        if reason:
            raise UnsupportedError(reason)
        r = compiled.compile_attention(args.block_m, args.block_n, d, dtype, args.target, causal=args.causal,
                                       num_warps=args.warps, num_stages=args.stages)
        out["compiled"] = r.to_json()
        if r.cannot_run and not r.compiled:
            lines.append(f"{r.target}: cannot run: {r.cannot_run}")
        else:
            lines.append(f"{r.target}: registers {r.registers} per thread, spill_bytes {r.spill_bytes}, shared "
                         f"{nbytes(r.shared_bytes or 0)} per block, {r.tensor_core_kind or 'no'} Tensor Core instructions")
            if r.cannot_run:
                lines.append(f"cannot run: {r.cannot_run}")
            elif r.blocks_per_sm is not None:
                lines.append(f"on {r.gpu}: blocks_per_sm {r.blocks_per_sm}, occupancy {r.occupancy or 0.0:.1%}, "
                             f"limited_by {r.limited_by}")
    ok = True
    if args.run:
        if not small:
            raise InputError(f"--run: b·a·s·d = {b * a * s * d:,} is too large for the interpreter here: keep it ≤ "
                             f"{flash.INTERPRETER_MAX_ELEMENTS:,}")
        chk = flash.check(b, a, s, d, dtype, causal=args.causal, block_m=args.block_m, block_n=args.block_n)
        out.update(max_abs_err=chk.max_abs_err, run_tolerance=chk.tolerance, run_passed=chk.passed,
                   run_device=chk.device)
        ok = chk.passed
        where = "Triton's interpreter on this CPU" if chk.interpreter else chk.device
        lines.append(f"ran on {where}: max_abs_err {chk.max_abs_err:.3g} against SDPA (tolerance "
                     f"{chk.tolerance:.3g}) " + ("ok" if ok else "FAILED"))
    if args.json:
        emit(out, True)
    else:
        emit(out, False, "\n".join(lines))
    return 0 if ok else 1
