"""`perflab kernel`: compile the course's Triton matmul for a GPU and say what the compiler made of it."""

from __future__ import annotations

from perflab.commands._args import emit, positive_int


def register(sub) -> None:
    p = sub.add_parser("kernel", help="compile the Triton matmul tile for sm_80/sm_90: registers, spills, shared "
                                      "memory, occupancy, Tensor Core instructions, waves")
    p.add_argument("--tile", default="128x128x64", help="BLOCK_MxBLOCK_NxBLOCK_K, powers of two (default 128x128x64)")
    p.add_argument("--warps", type=positive_int, default=4, help="num_warps (default 4)")
    p.add_argument("--stages", type=positive_int, default=3, help="num_stages, the software pipeline depth (default 3)")
    p.add_argument("--group-m", type=positive_int, default=8, help="GROUP_M of the grouped tile order (default 8)")
    p.add_argument("--dtype", default="fp16", help="fp16, bf16 or fp32 inputs (default fp16); fp32 accumulation")
    p.add_argument("--target", default="sm_90", help="sm_90 (H100), sm_80 (A100) or another Triton target (default sm_90)")
    p.add_argument("--gpu", help="a GPU of perflab's table for SM count and per-SM limits (default: h100-sxm for "
                                 "sm_90, a100-sxm-80gb for sm_80)")
    p.add_argument("--m", type=positive_int, help="GEMM rows: with --n and --k, adds tiles, waves, wave_efficiency")
    p.add_argument("--n", type=positive_int, help="GEMM columns")
    p.add_argument("--k", type=positive_int, help="GEMM reduction size")
    p.add_argument("--run", action="store_true", help="also run the kernel here (Triton's interpreter on a CPU) "
                                                      "and report max_abs_err against torch")
    p.add_argument("--no-cache", action="store_true", help="compile again even if this config is cached")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.core.errors import InputError, UnsupportedError
    from perflab.gemm import triton_matmul as tm

    shape_args = [args.m, args.n, args.k]
    if any(v is not None for v in shape_args) and not all(v is not None for v in shape_args):
        raise InputError("give all three of --m, --n and --k (or none)")
    shape = (args.m, args.n, args.k) if args.m is not None else None
    bm, bn, bk = tm.parse_tile3(args.tile)
    cfg = tm.TileConfig(bm, bn, bk, args.warps, args.stages, args.group_m)
    dtype = tm.dtype_name(args.dtype)
    reason = tm.unavailable_reason()
    if reason:
        raise UnsupportedError(reason)
    from perflab.gemm import compiled

    compiled.check_config(cfg, dtype, args.target, args.gpu)
    r = compiled.compile_tile(cfg, dtype, args.target, shape=shape, gpu=args.gpu, use_cache=not args.no_cache)
    out = compiled.report(r, shape)
    if args.run:
        m, n, k = shape or (200, 130, 96)
        chk = tm.check(m, n, k, dtype, cfg)
        out.update(max_abs_err=chk.max_abs_err, run_passed=chk.passed, run_device=chk.device,
                   run_shape=[m, n, k], run_atol=chk.atol, run_rtol=chk.rtol)
    if args.json:
        emit(out, True)
        return 0
    from perflab.core.readout import nbytes

    lines = [f"{cfg.label()} {dtype} compiled for {r.target}" + (" (cached)" if r.cached else f" in {r.seconds:.1f} s"),
             f"registers: {r.registers} per thread    spill_bytes: {r.spill_bytes}    "
             f"shared_bytes: {r.shared_bytes} ({nbytes(r.shared_bytes)}) per block",
             f"tensor_core_instructions: {r.tensor_core_instructions} ({r.tensor_core_kind or 'none'} in the PTX)",
             "PTX: " + (r.ptx_excerpt.splitlines()[0][:100] + " …" if r.tensor_core_kind else r.ptx_excerpt)]
    if r.cannot_run:
        lines.append(f"cannot run: {r.cannot_run}")
    elif r.occ is not None and r.limits is not None:
        lines.append(f"on {r.limits.name}: blocks_per_sm: {r.occ.blocks_per_sm}    occupancy: {r.occ.occupancy:.1%} "
                     f"({r.occ.warps_per_sm}/{r.limits.max_warps} warps)    limited_by: {r.occ.limited_by}")
    else:
        lines.append(f"no per-SM limits for {r.target} in perflab's table (it has them for sm_80, A100, and sm_90, "
                     "H100): occupancy and waves not computed")
    if "tiles" in out:
        lines.append(f"{args.m}×{args.n}×{args.k}: tiles: {out['tiles']}    waves: {out['waves']} of {out['wave_size']}    "
                     f"wave_efficiency: {out['wave_efficiency']:.1%}")
    if args.run:
        where = "Triton's interpreter on this CPU (its time means nothing)" if out["run_device"] == "cpu" else out["run_device"]
        lines.append(f"ran {out['run_shape'][0]}×{out['run_shape'][1]}×{out['run_shape'][2]} on {where}: "
                     f"max_abs_err: {out['max_abs_err']:.3g} (tolerance {out['run_atol']:.3g} + {out['run_rtol']:.3g}·|C|) "
                     + ("ok" if out["run_passed"] else "FAILED"))
    emit(out, False, "\n".join(lines))
    return 0 if not args.run or out["run_passed"] else 1
