"""The parts of `perflab report`: each measures one thing the way its lesson does.

| part        | what                                                        | from |
| ---         | ---                                                         | ---  |
| device      | the device, its spec-sheet (or estimated) peak per dtype    | perflab.core.hardware (00) |
| matmul      | one square matmul per supported dtype, TFLOP/s vs peak      | perflab.core.measure (00, 01) |
| mamf        | the maximum achievable matmul TFLOP/s (a small shape search) | perflab.gemm.mamf (04) |
| memory      | device-memory copy GB/s over buffer sizes; host→device GB/s (GPU) | perflab.core.measure (00) |
| waves       | TFLOP/s along n (a small wave sweep), the wave model on a GPU | perflab.gemm.shapes (04) |
| collectives | all-reduce algbw/busbw under torchrun (gloo, NCCL on GPUs)   | perflab.distributed.busbw (06) |
| numa        | NUMA nodes, distances, GPUs' nodes, this process's cores     | perflab.numa.topology (08) |
| dataloader  | the data wait per step against num_workers, with the model  | perflab.dataloading.loader (07) |
| tune        | the capstone ladder: each rung's step time, MFU, memory, parity (quick: the smoke preset without compile) | perflab.tune.runner (11) |

Each part is a function of a `Ctx` (the device, what it is, quick or full sizes) that returns a
`PartResult` (report_types.py): its `figures` (the numbers two machines are compared by, each a
`Figure` with a key, a label, a unit and which direction is better), its `data` (the measurements as
report.json holds them, which the report's page draws from), its `notes` and a one-line `summary`.
A part that cannot measure anything raises, with a one-line reason.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perflab.core.jsonable import JSON, to_json
from perflab.course.report_types import PartResult, figure

if TYPE_CHECKING:  # torch is imported where a part runs: `perflab shuffle` must not wait for it
    import torch


@dataclass
class Ctx:
    device: torch.device
    info: Any  # perflab.core.device.DeviceInfo
    quick: bool

    @property
    def gpu(self) -> bool:
        return self.device.type == "cuda"

    def pick(self, *, quick: Any, cpu: Any, gpu: Any = None) -> Any:
        """A size for this run: `quick` in quick mode, else `gpu` on a CUDA device, `cpu` otherwise."""
        if self.quick:
            return quick
        return gpu if (self.gpu and gpu is not None) else cpu


# ---------------------------------------------------------------- the parts

def part_device(ctx: Ctx) -> PartResult:
    import torch

    from perflab.core.dtypes import supported_matmul_dtypes
    from perflab.core.hardware import peaks_for

    peaks = peaks_for(ctx.info)
    supported = supported_matmul_dtypes(ctx.device)
    spec = peaks.spec
    figs = [figure(f"peak.{d}", f"peak {d} ({peaks.source})", v, "TFLOP/s")
            for d, v in peaks.as_dict().items() if v is not None]
    if spec is not None and spec.memory_bandwidth_gbps:
        figs.append(figure("spec.memory_bandwidth", "memory bandwidth (spec sheet)", spec.memory_bandwidth_gbps, "GB/s"))
    notes = list(peaks.notes)
    if peaks.cpu_estimate is not None:
        notes.append(peaks.cpu_estimate.explain("fp32"))
    data = {"device": ctx.info.as_dict(), "peak_tflops": peaks.as_dict(), "peak_source": peaks.source,
            "spec_id": spec.id if spec else None, "spec_sources": dict(spec.sources) if spec else {},
            "supported_dtypes": supported, "torch_version": torch.__version__,
            "cuda_version": torch.version.cuda, "python": platform.python_version()}
    peak_text = ", ".join(f"{d} {v:.3g}" for d, v in peaks.as_dict().items() if v is not None) or "unknown"
    return PartResult(figs, data, notes, f"{ctx.info.name}: peak TFLOP/s ({peaks.source}) {peak_text}")


def part_matmul(ctx: Ctx) -> PartResult:
    from perflab.core.dtypes import supported_matmul_dtypes
    from perflab.core.measure import measure_matmul
    from perflab.core.readout import spread_note

    n = ctx.pick(quick=256, cpu=1024, gpu=8192)
    rows, figs, failed = [], [], []
    for d in supported_matmul_dtypes(ctx.device):
        size = n if (ctx.gpu or d in ("fp32", "bf16")) else min(n, 512)  # fp16 on a CPU is slow
        try:
            r = measure_matmul(size, size, size, d, ctx.device, rep_ms=ctx.pick(quick=30, cpu=100, gpu=100),
                               warmup_ms=ctx.pick(quick=10, cpu=25, gpu=25))
        except Exception as e:  # one dtype failing does not lose the others
            from perflab.core.errors import one_line

            failed.append(f"{d}: {one_line(e)}")
            continue
        rows.append({"dtype": d, "n": size, "tflops": r.tflops, "median_s": r.median_s, "spread": r.spread,
                     "peak_tflops": r.peak_tflops, "peak_fraction": r.peak_fraction, "rel_error": r.rel_error})
        figs.append(figure(f"matmul.{d}", f"matmul {d} ({size}³)", r.tflops, "TFLOP/s"))
        noisy = spread_note(r.spread)
        if noisy:
            failed.append(f"{d}: {noisy}")
    if not rows:
        raise RuntimeError("no dtype could be measured: " + "; ".join(failed))
    return PartResult(figs, {"rows": rows}, failed, ", ".join(f"{r['dtype']} {r['tflops']:.3g}" for r in rows) + " TFLOP/s")


def part_mamf(ctx: Ctx) -> PartResult:
    from perflab.core.hardware import peaks_for
    from perflab.gemm.mamf import default_ranges, measured_ceiling, parse_range, search

    dtype = "bf16" if ctx.gpu else "fp32"
    if ctx.quick:
        vals = parse_range(2048, 8192, 2048) if ctx.gpu else parse_range(128, 256, 128)
        ranges = {"m": vals, "n": vals, "k": vals}
    else:
        full = default_ranges(ctx.gpu)
        ranges = {ax: v[1::2] if ctx.gpu else v for ax, v in full.items()}  # every other GPU size: minutes, not hours
    r = search(ranges["m"], ranges["n"], ranges["k"], dtype=dtype, device=ctx.device,
               rep_ms=ctx.pick(quick=20, cpu=60, gpu=60), warmup_ms=ctx.pick(quick=5, cpu=20, gpu=20),
               name=f"report{'_quick' if ctx.quick else ''}_mamf_{dtype}", progress=False,
               save_ceiling=not ctx.quick)
    if r.best is None:
        raise RuntimeError(f"no shape could be measured ({r.evaluated} tried)")
    peak = peaks_for(ctx.info).get(dtype)
    stored = measured_ceiling(ctx.info, dtype)
    points = [{"m": p["m"], "n": p["n"], "k": p["k"], "tflops": p["mean"], "stage": p["stage"]}
              for p in r.rows if p.get("status") == "ok" and p.get("mean") is not None]
    figs = [figure(f"mamf.{dtype}", f"MAMF {dtype} (best of {r.evaluated} shapes)", r.best["tflops"], "TFLOP/s")]
    if stored is not None:
        figs.append(figure(f"mamf.{dtype}.stored", f"measured ceiling {dtype} (perflab mamf, stored)", stored, "TFLOP/s"))
    b = r.best
    return PartResult(
        figs,
        data={"dtype": dtype, "best": {k: b[k] for k in ("m", "n", "k", "tflops", "mean", "median", "max") if k in b},
              "evaluated": r.evaluated, "grid_points": r.grid_points, "peak_tflops": peak,
              "peak_fraction": b["tflops"] / peak if peak else None, "stored_ceiling": stored,
              "ranges": {ax: [v[0], v[-1], len(v)] for ax, v in ranges.items()}, "points": points},
        notes=([] if stored is not None else ["no full `perflab mamf` search stored for this device yet"])
        + [n for n in (r.saved_note(), r.stored_note() if stored is None else None) if n],
        summary=f"MAMF {dtype} {b['tflops']:.3g} TFLOP/s at {b['m']}×{b['n']}×{b['k']}"
                + (f" ({b['tflops'] / peak:.0%} of peak)" if peak else ""))


def part_memory(ctx: Ctx) -> PartResult:
    from perflab.core.measure import measure_copy_bandwidth, measure_host_to_device
    from perflab.core.readout import spread_note

    sizes = ctx.pick(quick=[1, 8, 64], cpu=[1, 4, 16, 64, 256], gpu=[1, 16, 256, 1024])
    rows = []
    notes = []
    for mib in sizes:
        r = measure_copy_bandwidth(mib * 2**20, ctx.device, rep_ms=ctx.pick(quick=20, cpu=50, gpu=50),
                                   warmup_ms=ctx.pick(quick=5, cpu=25, gpu=25))
        noisy = spread_note(r.spread)
        if noisy:
            notes.append(f"{mib} MiB copy: {noisy}")
        rows.append({"nbytes": r.nbytes, "gbps": r.gbps, "median_s": r.median_s, "spread": r.spread,
                     "spec_gbps": r.spec_gbps})
    best = max(rows, key=lambda x: x["gbps"])
    largest = rows[-1]
    figs = [figure("copy.largest", f"device copy GB/s ({largest['nbytes'] // 2**20} MiB)", largest["gbps"], "GB/s"),
            figure("copy.best", "device copy GB/s (best size)", best["gbps"], "GB/s")]
    h2d = []
    if ctx.gpu:
        nb = ctx.pick(quick=64, cpu=256, gpu=256) * 2**20
        for pinned in (True, False):
            r = measure_host_to_device(nb, pinned, ctx.device, rep_ms=ctx.pick(quick=20, cpu=50, gpu=50))
            kind = "pinned" if pinned else "pageable"
            h2d.append({"kind": kind, "nbytes": r.nbytes, "gbps": r.gbps, "spread": r.spread})
            figs.append(figure(f"h2d.{kind}", f"host→device GB/s ({kind})", r.gbps, "GB/s"))
    else:
        notes.append("host→device: not measured (no CUDA GPU: on a CPU the data is already in host memory)")
    return PartResult(figs, {"copy": rows, "h2d": h2d}, notes,
                      f"copy {largest['gbps']:.3g} GB/s at {largest['nbytes'] // 2**20} MiB"
                      + "".join(f", H2D {h['kind']} {h['gbps']:.3g} GB/s" for h in h2d))


def part_waves(ctx: Ctx) -> PartResult:
    from perflab.core.hardware import peaks_for
    from perflab.gemm import shapes

    dtype = "bf16" if ctx.gpu else "fp32"
    fixed = ctx.pick(quick={"m": 2304, "k": 4096} if ctx.gpu else {"m": 256, "k": 256}, cpu={"m": 512, "k": 512},
                     gpu={"m": 2304, "k": 4096})
    values = shapes.fine_values(*ctx.pick(quick=(256, 4096, 256) if ctx.gpu else (64, 512, 64), cpu=(32, 1024, 32),
                                          gpu=(128, 6144, 64)))
    sw = shapes.sweep_dimension("n", values, fixed, dtype, ctx.device,
                                name=f"report{'_quick' if ctx.quick else ''}_waves_{dtype}",
                                rep_ms=ctx.pick(quick=5, cpu=30, gpu=30), warmup_ms=ctx.pick(quick=2, cpu=5, gpu=10),
                                progress=False)
    ok = [r for r in sw.rows if r.get("status") == "ok"]
    if not ok:
        raise RuntimeError("no point of the wave sweep could be measured")
    rows = [{"n": r["params"]["n"], "tflops": r["tflops"], "median_s": r["median_s"]} for r in ok]
    data: JSON = {"dim": "n", "fixed": fixed, "dtype": dtype, "rows": rows, "failed": sw.failed}
    notes = []
    sms, where = shapes.sm_count_of(ctx.info)
    if sms:
        peak = peaks_for(ctx.info).get(dtype)
        model = shapes.staircase("n", values, fixed, sms=sms, peak_tflops=peak)
        data["model"] = {"sms": sms, "sms_source": where, "tile": "256x128",
                         "predicted_tflops": [float(x) for x in model["predicted_tflops"]] if "predicted_tflops" in model else [],
                         "cliffs": shapes.cliffs("n", values, fixed, sms=sms)}
        if len(rows) >= 3:
            fit = shapes.fit_tile([r["n"] for r in rows], [r["median_s"] for r in rows], "n", fixed, sms=sms)
            data["fit"] = {k: (float(v) if isinstance(v, (int, float)) else v) for k, v in fit.best.items()}
    else:
        notes.append(f"wave model: {where} (a CPU has no SMs and no waves; its BLAS tiles the matmul its own way)")
    best = max(rows, key=lambda r: r["tflops"])
    worst = min(rows, key=lambda r: r["tflops"])
    figs = [figure(f"waves.{dtype}.best", f"wave sweep best {dtype} (n = {best['n']})", best["tflops"], "TFLOP/s"),
            figure(f"waves.{dtype}.worst_over_best", "wave sweep worst / best", worst["tflops"] / best["tflops"], "×", None)]
    return PartResult(figs, data, notes, f"{len(rows)} sizes of n at m×k = {fixed['m']}×{fixed['k']}: "
                                         f"{worst['tflops']:.3g}–{best['tflops']:.3g} TFLOP/s")


def part_collectives(ctx: Ctx) -> PartResult:
    import torch

    from perflab.distributed import busbw

    ngpu = torch.cuda.device_count() if ctx.gpu else 0
    nproc = ngpu if ngpu >= 2 else 2
    sizes = ctx.pick(quick=["64K", "1M"], cpu=["64K", "1M", "16M", "64M"], gpu=["1M", "16M", "256M", "1G"])
    r = busbw.measure("all_reduce", nproc, sizes, budget_s=ctx.pick(quick=0.1, cpu=0.2, gpu=0.2))
    ok = [x for x in r.rows if x.get("status", "ok") == "ok" and x.get("correct", True)]
    if not ok:
        raise RuntimeError(f"all_reduce measured no size: {r.report()}")
    rows = [{"bytes": x["bytes"], "seconds": x["seconds"], "algbw_gbps": x["algbw_gbps"], "busbw_gbps": x["busbw_gbps"]}
            for x in ok]
    top = max(rows, key=lambda x: x["busbw_gbps"])
    figs = [figure(f"busbw.all_reduce.{r.backend}", f"all_reduce busbw ({nproc} ranks, {r.backend}, best size)",
                   top["busbw_gbps"], "GB/s")]
    notes = [] if ngpu >= 2 else [f"{nproc} ranks on {'one GPU' if ngpu == 1 else 'this CPU'} with {r.backend}: "
                                  "a measure of local inter-process copies, not of a network or NVLink"]
    bad = [x for x in r.rows if x not in ok]
    notes += [f"{x['bytes']} B: {x.get('reason', 'wrong result')}" for x in bad]
    return PartResult(figs, {"op": "all_reduce", "nproc": nproc, "backend": r.backend, "rows": rows,
                             "factor": busbw.bus_factor("all_reduce", nproc)},
                      notes, f"all_reduce {r.backend} × {nproc}: busbw up to {top['busbw_gbps']:.3g} GB/s")


def part_numa(ctx: Ctx) -> PartResult:
    from perflab.numa.topology import read_topology

    topo = read_topology()
    d = topo.as_dict()
    data: JSON = {"topology": d}
    notes = []
    if not ctx.quick:
        from perflab.numa.effect import memory_local_vs_remote, skip_reason

        why = skip_reason(topo)
        if why is None:
            data["local_vs_remote"] = to_json(memory_local_vs_remote(topo, 256 * 2**20))
        else:
            notes.append(f"local vs remote memory: {why}")
    cpus = sum(len(n["cpus"]) for n in d["nodes"])
    figs = [figure("numa.nodes", "NUMA nodes", len(d["nodes"]), "", None),
            figure("numa.cpus", "online CPUs", cpus, "", None),
            figure("numa.affinity", "CPUs this process may use", len(d["affinity"]), "", None),
            figure("numa.gpus", "GPUs on the PCI bus", len(d["gpus"]), "", None)]
    return PartResult(figs, data, notes, f"{len(d['nodes'])} node(s), {cpus} CPUs, {len(d['gpus'])} GPU(s) on the PCI bus")


def part_dataloader(ctx: Ctx) -> PartResult:
    from perflab.dataloading import compute, loader

    workers = ctx.pick(quick=[0, 1, 2], cpu=[0, 1, 2, 4], gpu=[0, 1, 2, 4, 8])
    io_ms, compute_ms = ctx.pick(quick=(2.0, 10.0), cpu=(5.0, 20.0), gpu=(5.0, 20.0))
    batch, batches = ctx.pick(quick=(4, 8), cpu=(8, 20), gpu=(8, 30))
    step = compute.calibrate(compute_ms, ctx.device, budget_s=ctx.pick(quick=0.05, cpu=0.15))
    res = loader.sweep_workers(workers, batch=batch, batches=batches, io_ms=io_ms, transform_ms=0.0, step=step)
    rows, failed = [], []
    for r in res.rows:
        if r["status"] == "ok":
            rows.append({k: r[k] for k in ("step_s", "data_wait_s", "wait_fraction", "predicted_wait_s", "first_wait_s")}
                        | {"workers": r["params"]["workers"]})
        else:
            failed.append(f"{r['params']['workers']} workers: {r['reason']}")
    if not rows:
        raise RuntimeError("no worker count could be measured: " + "; ".join(failed))
    figs = [figure(f"dataloader.wait.{r['workers']}w", f"data wait per step, {r['workers']} workers",
                   r["data_wait_s"] * 1e3, "ms", "lower") for r in rows]
    return PartResult(figs, {"rows": rows, "io_ms": io_ms, "compute_ms": compute_ms, "batch": batch, "batches": batches,
                             "cores": loader.available_cores()},
                      failed, "wait per step " + ", ".join(f"{r['workers']}w {r['data_wait_s'] * 1e3:.1f} ms" for r in rows)
                      + f" (compute {compute_ms:g} ms, IO {io_ms:g} ms per sample × {batch})")


QUICK_TUNE_RUNGS = "baseline,adamw,sdpa,batch,loader"  # quick mode: seconds, no compile


def part_tune(ctx: Ctx) -> PartResult:
    from perflab.tune.ladder import default_preset
    from perflab.tune.runner import run_ladder

    if ctx.quick:
        res = run_ladder("smoke", QUICK_TUNE_RUNGS, device=ctx.device, profile=False)
    else:
        res = run_ladder(default_preset(ctx.device.type), device=ctx.device)
    rows = [{k: r.get(k) for k in ("rung", "step_s", "tokens_per_s", "mfu", "hfu", "mfu_basis", "peak_bytes",
                                   "loss_delta", "parity_ok", "speedup_vs_baseline", "adopted", "applicable", "note")}
            for r in res.rows]
    final, base = res.final, res.baseline
    figs = [figure("tune.baseline_tokens_per_s", f"ladder baseline tokens/s ({res.preset})", base["tokens_per_s"], "tokens/s"),
            figure("tune.final_tokens_per_s", f"ladder final tokens/s ({res.preset})", final["tokens_per_s"], "tokens/s"),
            figure("tune.speedup", f"ladder speed-up over its baseline ({res.preset})", final["speedup_vs_baseline"], "×")]
    notes = [f"{r['rung']}: {r['note']}" for r in res.rows if not r.get("applicable", True)]
    if res.stopped:
        notes.append(f"stopped: {res.stopped}")
    adopted = [r["rung"] for r in res.rows if r.get("adopted") and r["rung"] != "baseline"]
    return PartResult(figs, {"preset": res.preset, "rows": rows, "stopped": res.stopped}, notes,
                      f"{res.preset} preset: {final['speedup_vs_baseline']:.2f}× the baseline with "
                      f"{', '.join(adopted) or 'no rung adopted'}; parity kept on every measured rung"
                      if not res.stopped else f"{res.preset} preset: stopped ({res.stopped})")
