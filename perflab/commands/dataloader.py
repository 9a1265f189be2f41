"""`perflab dataloader`: measure the data wait of a training loop for several worker counts, beside the model."""

from __future__ import annotations

from perflab.commands._args import emit, nonneg_float, positive_int, whole_number


def _ms(text: str) -> float:
    return nonneg_float(text, "ms")


def _workers(text: str) -> int:
    return whole_number(text, "of workers")


def register(sub) -> None:
    p = sub.add_parser("dataloader", help="data wait per step vs num_workers, measured and predicted")
    p.add_argument("--workers", type=_workers, nargs="+", default=[0, 1, 2], help="num_workers values (default 0 1 2)")
    p.add_argument("--io-ms", type=_ms, default=5.0, help="IO latency per sample, ms (a wait)")
    p.add_argument("--transform-ms", type=_ms, default=0.0, help="transform CPU work per sample, ms")
    p.add_argument("--compute-ms", type=_ms, default=20.0, help="device compute per step, ms (real matmuls)")
    p.add_argument("--batches", type=positive_int, default=30, help="steps measured per setting (default 30)")
    p.add_argument("--batch", type=positive_int, default=32, help="samples per batch (default 32)")
    p.add_argument("--prefetch", type=positive_int, default=2, help="prefetch_factor (default 2)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds a worker may take for one batch (default 30)")
    p.add_argument("--pin", action="store_true", help="pin_memory=True and non_blocking copies (GPU only; ignored on CPU)")
    p.add_argument("--device", help="cuda or cpu (default: the best here)")
    p.add_argument("--json", action="store_true", help="print JSON: one row per setting")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.core.device import pick_device
    from perflab.core.errors import InputError
    from perflab.dataloading import compute, loader
    from perflab.dataloading.waits import WorkerSweep

    if args.compute_ms <= 0:
        raise InputError("--compute-ms must be > 0: the step needs some work to hide loading behind")
    dev = pick_device(args.device)
    step = compute.calibrate(args.compute_ms, dev)
    res = loader.sweep_workers(sorted(set(args.workers)), batch=args.batch, batches=args.batches, io_ms=args.io_ms,
                               transform_ms=args.transform_ms, step=step, pin=args.pin,
                               prefetch_factor=args.prefetch, timeout=args.timeout)
    sweep = WorkerSweep.from_sweep(res)
    rows = [p.to_json() for p in sweep.points]
    lines = [f"device {dev} · batch {args.batch} · IO {args.io_ms:g} ms + transform {args.transform_ms:g} ms per sample · "
             f"compute {args.compute_ms:g} ms per step · {loader.available_cores()} cores",
             f"{'workers':>7} {'step ms':>8} {'wait ms':>8} {'wait %':>7} {'model ms':>9} {'first ms':>9}  machine"]
    for p in sweep.points:
        if not p.ok:
            lines.append(f"{p.workers:>7} failed: {p.reason}")
        else:
            lines.append(f"{p.workers:>7} {(p.step_s or 0) * 1e3:8.1f} {(p.data_wait_s or 0) * 1e3:8.1f} "
                         f"{p.wait_fraction or 0:7.0%} {(p.predicted_wait_s or 0) * 1e3:9.1f} "
                         f"{(p.first_wait_s or 0) * 1e3:9.1f}  {p.quietness.line()}")
    lines.append("wait = median time blocked in next() per step (first step excluded; 'first' is it, worker start included)")
    if sweep.disturbed:
        n = len(sweep.disturbed)
        lines.append(f"{n} of {len(sweep.ok_points)} setting{'s' if len(sweep.ok_points) != 1 else ''} measured while "
                     "other programs used the cores: their waits are a share of a busy machine, not the loader's own; "
                     "measure again on a quiet machine before comparing them with the model")
    emit(rows, args.json, "\n".join(lines))
    return 0 if res.failed == 0 else 1
