"""`perflab profile`: profile a training step (with a planted fault) and name why the device idles,
or diagnose a trace someone else exported (`--trace FILE`)."""

from __future__ import annotations

from perflab.commands._args import emit, positive_int


def register(sub) -> None:
    p = sub.add_parser("profile", help="profile a training step (optionally with a planted fault) or diagnose "
                                       "an exported torch.profiler trace: device busy share and the causes of idle time")
    p.add_argument("--trace", metavar="PATH", help="diagnose this exported Chrome trace (.json or .json.gz, object or "
                                                   "array form) or every trace in this folder, instead of profiling")
    p.add_argument("--preset", default="tiny-gpt", help="model preset (default tiny-gpt)")
    p.add_argument("--fault", default="none", help="planted fault: none, loader, sync, launch, comm (default none)")
    p.add_argument("--fixed", action="store_true", help="apply the fault's fix (the gap should be gone)")
    p.add_argument("--steps", type=positive_int, default=5,
                   help="profiled (active) steps, after 1 wait and 1 warm-up step (default 5: enough to see whether the "
                        "cause holds from step to step)")
    p.add_argument("--batch", type=positive_int, default=4, help="sequences per batch (default 4)")
    p.add_argument("--seq", type=positive_int, default=64, help="tokens per sequence (default 64)")
    p.add_argument("--trace-out", metavar="FILE", help="where to write the trace (default: a temporary folder)")
    p.add_argument("--launcher", default="torchrun", choices=("torchrun", "fork"),
                   help="how --fault comm starts its 2 gloo ranks (default torchrun)")
    p.add_argument("--json", action="store_true",
                   help='print JSON: {"step_s", "device_busy", "causes": [{"cause", "seconds", "share", "evidence"}], "trace_file", '
                        '"steps", "step_source", "per_step", "step_times_s", "top_by_step", "stable", "ops_s"} (a list of them for a folder of traces)')
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.core.errors import InputError
    from perflab.profiling.diagnose import NONE_THRESHOLD, diagnose
    from perflab.profiling.faults import check_fault, profile_step

    if args.trace:
        from perflab.profiling.trace import trace_files

        files = trace_files(args.trace)
        if len(files) > 1:  # a folder (tensorboard_trace_handler's): each trace on its own
            import sys

            from perflab.core.errors import PerflabError, one_line

            ds, bad = [], []
            for f in files:
                try:
                    ds.append((f, diagnose(f)))
                except PerflabError as e:
                    bad.append(f"{f}: {one_line(e)}")
            if not ds:
                raise InputError(f"no usable trace among the {len(files)} in {args.trace}; the first: {bad[0]}")
            for line in bad:  # the unusable ones, one line each, beside the answers for the others
                sys.stderr.write(f"perflab profile: skipped {line}\n")
            emit([d.as_json() for _, d in ds], args.json,
                 f"{args.trace}: {len(ds)} trace(s)\n" + "\n".join(f"{f}:\n{d.summary(NONE_THRESHOLD)}" for f, d in ds))
            return 0
        d = diagnose(files[0])
        head = f"{files[0]}:"
    else:
        fault = check_fault(args.fault)
        if args.steps > 50:
            raise InputError(f"--steps {args.steps} is more than 50: a trace of a few steps is enough")
        run_ = profile_step(args.preset, fault, fixed=args.fixed, steps=args.steps, batch=args.batch, seq=args.seq,
                            trace_out=args.trace_out, launcher=args.launcher)
        d = run_.diagnosis
        head = (f"{run_.preset}, fault {fault}{' (fixed)' if args.fixed else ''}, batch {args.batch} × seq {args.seq}; "
                f"trace: {run_.trace_path} (open it in https://ui.perfetto.dev or chrome://tracing)")
    emit(d.as_json(), args.json, head + "\n" + d.summary(NONE_THRESHOLD))
    return 0
