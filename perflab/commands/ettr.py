"""`perflab ettr`: the effective training time ratio of a job, and its optimal checkpoint interval."""

from __future__ import annotations

from perflab.commands._args import emit, nonneg_float, positive_float, positive_int


def register(sub) -> None:
    p = sub.add_parser("ettr", help="effective training time ratio from job length, failures, checkpoints and restarts "
                                    "(Daly's exponential model, first-order beside it); the best checkpoint interval")
    p.add_argument("--hours", type=positive_float, required=True, help="job wall time in hours")
    p.add_argument("--gpus", type=positive_int, required=True, help="GPUs in the job")
    p.add_argument("--mtbf-hours", type=positive_float, required=True,
                   help="mean time between failures of ONE GPU (with its share of host, network, ...), in hours")
    p.add_argument("--ckpt-minutes", type=positive_float, required=True, help="minutes one (blocking) checkpoint takes")
    p.add_argument("--restart-minutes", type=nonneg_float, required=True,
                   help="minutes from a failure to training again (detect, reschedule, load the checkpoint)")
    p.add_argument("--interval-minutes", type=positive_float,
                   help="minutes of training between checkpoints (default: the optimum, the peak of the ETTR curve)")
    p.add_argument("--json", action="store_true", help="print JSON: ettr, ettr_first_order, ettr_at_optimum, "
                                                       "optimal_interval_min, daly_interval_min, young_interval_min, "
                                                       "job_mtbf_hours, expected_failures, ...")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.profiling.ettr import ettr

    e = ettr(args.hours, args.gpus, args.mtbf_hours, args.ckpt_minutes, args.restart_minutes, args.interval_minutes)
    emit(e.as_dict(), args.json, e.describe())
    return 0
