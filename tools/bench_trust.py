"""Can the ladder's verdicts be trusted on this machine, as it is right now? A benchmark that reports
(exit 0 unless it crashes), not a test: what it measures depends on what else the machine runs.

    python tools/bench_trust.py [--preset smoke] [--rung adamw] [--repeats 2] [--json]

It times, as `perflab tune` does (`perflab.tune.runner.measure_pair`: watched blocks of interleaved
pairs, `perflab.tune.verdict`):

* **A/A**: the baseline against itself, `--repeats` times. The true speed-up is 1.00×, below the
  threshold, so a trustworthy rule says "kept out" or "inconclusive", never "adopted";
* **A/B**: one rung (`--rung`) against the baseline, `--repeats` times. Two measurements of the same
  rung must never give opposite verdicts (one "adopted", another "kept out");

each with the machine's quietness while it ran (`perflab.core.quietness`), and, on a CUDA GPU, the
comparisons the GPU tests no longer assert: TF32 against fp32 matmuls, pinned against pageable
host-to-device copies, perflab's timer against triton's `do_bench`. Run it once with the machine quiet
and once with a neighbour (`python3 -c 'while True: pass' &`) to see the difference.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's perflab, run from anywhere


def _pair(tp, prev, cand, device, budget_s: float) -> dict[str, Any]:
    from perflab.tune.runner import measure_pair

    t0 = time.perf_counter()
    pm = measure_pair(tp, prev, cand, min_pairs=tp.steps, warmup=tp.warmup, device=device, budget_s=budget_s,
                      profile=False)
    d = pm.decision
    return {"verdict": pm.verdict, "text": d.text(), "point": d.interval.point, "interval": [d.interval.lo, d.interval.hi],
            "pairs": d.interval.pairs, "blocks_kept": d.kept, "blocks_dropped": d.dropped, "busy": d.busy,
            "quietness": d.quietness.to_json(), "quietness_line": d.quietness.line(), "waited_s": pm.waited_s,
            "timed_s": pm.timed_s, "wall_s": time.perf_counter() - t0}


def verdict_checks(preset: str, rung: str, repeats: int, budget_s: float | None) -> dict[str, Any]:
    import torch

    from perflab.core.device import pick_device
    from perflab.tune.ladder import preset as tune_preset
    from perflab.tune.runner import StepConfig, apply_rung

    tp = tune_preset(preset)
    device = pick_device() if preset == "gpu" else torch.device("cpu")
    base = StepConfig(micro_batch=tp.micro_batch)
    change = apply_rung(rung, base, tp, device, [])
    if not change.applicable:
        raise SystemExit(f"rung {rung!r} does not apply to preset {preset!r} here: {change.note}")
    budget = tp.rung_budget_s if budget_s is None else budget_s
    out: dict[str, Any] = {"preset": preset, "rung": rung, "device": str(device), "budget_s": budget,
                           "aa": [], "ab": []}
    for i in range(repeats):
        print(f"A/A {i + 1}/{repeats}: the baseline against itself …", file=sys.stderr, flush=True)
        out["aa"].append(_pair(tp, base, base, device, budget))
        print(f"A/B {i + 1}/{repeats}: {rung} against the baseline …", file=sys.stderr, flush=True)
        out["ab"].append(_pair(tp, base, change.config, device, budget))
    aa = [r["verdict"] for r in out["aa"]]
    ab = [r["verdict"] for r in out["ab"]]
    out["aa_never_adopted"] = "adopted" not in aa
    out["ab_never_opposite"] = not ("adopted" in ab and "kept out" in ab)
    return out


def gpu_checks() -> dict[str, Any]:
    """The real-timing comparisons the GPU tests used to assert, reported with their quietness."""
    import torch

    from perflab.core.measure import measure_host_to_device, measure_matmul
    from perflab.core.timing import bench

    out: dict[str, Any] = {}
    if torch.cuda.get_device_capability()[0] >= 8:
        fp32 = measure_matmul(4096, 4096, 4096, "fp32", "cuda")
        tf32 = measure_matmul(4096, 4096, 4096, "tf32", "cuda")
        out["tf32_over_fp32"] = {"fp32_tflops": fp32.tflops, "tf32_tflops": tf32.tflops,
                                 "ratio": tf32.tflops / fp32.tflops}
    pinned = measure_host_to_device(256 * 2**20, pinned=True)
    pageable = measure_host_to_device(256 * 2**20, pinned=False)
    out["pinned_over_pageable"] = {"pinned_gbps": pinned.gbps, "pageable_gbps": pageable.gbps,
                                   "ratio": pinned.gbps / pageable.gbps}
    try:
        import triton.testing as tt
    except ImportError:
        out["bench_vs_do_bench"] = "triton is not installed"
    else:
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        ours = bench(lambda: a @ b, warmup_ms=100, rep_ms=500)
        theirs = tt.do_bench(lambda: a @ b, warmup=100, rep=500, return_mode="median")
        theirs_ms = float(theirs) if isinstance(theirs, (int, float)) else float("nan")
        out["bench_vs_do_bench"] = {"perflab_ms": ours.median_s * 1e3, "do_bench_ms": theirs_ms,
                                    "ratio": ours.median_s * 1e3 / theirs_ms, "quietness": ours.quietness.to_json()}
    return out


def report(res: dict[str, Any]) -> str:
    lines = [f"machine before: {res['before']}",
             f"preset {res['preset']} on {res['device']}, rung {res['rung']}, budget {res['budget_s']:g} s per measurement"]
    for key, title in (("aa", "A/A (the baseline against itself: never 'adopted')"),
                       ("ab", f"A/B ({res['rung']} against the baseline: never opposite verdicts)")):
        lines.append(title)
        for i, r in enumerate(res[key], 1):
            lines.append(f"  {i}. {r['text']}  [{r['blocks_kept']} blocks kept, {r['blocks_dropped']} dropped; "
                         f"{r['quietness_line']}; waited {r['waited_s']:.1f} s, measured {r['timed_s']:.1f} s]")
    lines.append(f"A/A never adopted: {'yes' if res['aa_never_adopted'] else 'NO'}; "
                 f"A/B never opposite: {'yes' if res['ab_never_opposite'] else 'NO'}")
    for name, g in (res.get("gpu") or {}).items():
        lines.append(f"GPU {name}: {g if isinstance(g, str) else json.dumps(g)}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--preset", default="smoke", help="smoke (seconds), cpu or gpu (lesson 11's presets)")
    ap.add_argument("--rung", default="adamw", help="the rung of the A/B check (default adamw)")
    ap.add_argument("--repeats", type=int, default=2, help="measurements of each check (default 2)")
    ap.add_argument("--budget", type=float, default=None, help="seconds of timing per measurement (default: the preset's)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()

    import torch

    from perflab.core.quietness import watch

    with watch("cpu") as w:
        time.sleep(1.0)
    res = verdict_checks(args.preset, args.rung, max(1, args.repeats), args.budget)
    res["before"] = w.result.line()
    res["before_quietness"] = w.result.to_json()
    if torch.cuda.is_available():
        res["gpu"] = gpu_checks()
    print(json.dumps(res, indent=1) if args.json else report(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
