"""Figures and the widget view for lesson 03 (memory). Each function returns a Figure (or a
(Figure, DataFrame) pair); every axis says its unit (MiB/GiB = 2**20/2**30 bytes, GB = 1e9)."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from perflab.core.errors import InputError
from perflab.memory.estimate import GB, GiB, activations_per_layer_bytes, estimate
from perflab.memory.estimate import step_phases as _step_phases
from perflab.memory.published import references  # noqa: F401  (its home is `published`; lesson 03 read it here)

if TYPE_CHECKING:
    from perflab.memory.recompute import CheckpointingEffect

MiB = 2**20

COLORS = {
    "weights": "#4C72B0", "master_weights": "#64B5CD", "gradients": "#DD8452", "optimizer_states": "#55A868",
    "activations": "#C44E52", "peak − sum of parts": "#8172B3", "allocated at the peak": "#B0B0B0",
    "outside torch's allocator": "#937860", "allocator cache (reserved − allocated)": "#DA8BC3",
    "CUDA context, kernels, other processes": "#8C8C8C",
}


def _unit(max_bytes: float) -> tuple[float, str]:
    if max_bytes >= 10 * GB:
        return GB, "GB (1e9 bytes)"
    if max_bytes >= GiB:
        return GiB, "GiB"
    return MiB, "MiB"


def stacked_bars(bars: dict[str, dict[str, float]], *, title: str = "", capacity: float | None = None,
                 capacity_label: str = "device memory", ax=None, unit: tuple[float, str] | None = None,
                 legend: bool = True):
    """One stacked bar per entry of `bars` ({bar label: {component: bytes}}). A negative component
    is drawn below the stack's top, hatched (bytes the sum of parts counts but never coexist)."""
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(max(5.5, 1.9 * len(bars) + 2.5), 4.2))
    else:
        fig = ax.figure
    top = max([sum(max(v, 0) for v in parts.values()) for parts in bars.values()] + [capacity or 0, 1])
    div, uname = unit or _unit(top)
    seen: set[str] = set()
    for i, parts in enumerate(bars.values()):
        y = 0.0
        for comp, v in parts.items():
            if v >= 0:
                ax.bar(i, v / div, bottom=y / div, color=COLORS.get(comp, None), width=0.6,
                       label=comp if comp not in seen else None, edgecolor="white", linewidth=0.5)
                y += v
                seen.add(comp)
        for comp, v in parts.items():
            if v < 0:
                ax.bar(i, v / div, bottom=y / div, color="none", width=0.6, hatch="///", edgecolor=COLORS.get(comp, "gray"),
                       label=f"{comp} (negative)" if comp + "-" not in seen else None)
                y += v
                seen.add(comp + "-")
        ax.text(i, max(y, sum(max(v, 0) for v in parts.values())) / div, f"{y / div:.3g} {uname.split()[0]}",
                ha="center", va="bottom", fontsize=9)
    if capacity:
        ax.axhline(capacity / div, color="black", linestyle="--", linewidth=1)
        ax.text(len(bars) - 0.5, capacity / div, f" {capacity_label}", va="bottom", ha="right", fontsize=8)
    ax.set_xticks(range(len(bars)), list(bars), fontsize=9)
    ax.set_ylabel(f"memory ({uname})")
    ax.set_ylim(0, top / div * 1.18)
    ax.set_title(title, fontsize=10)
    if legend:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        fig.tight_layout()
    return fig


def step_figure(bars: dict[str, dict[str, float]], *, title: str = ""):
    """The bars of `step_bars` (plus any prediction): torch's allocator on the left; what the
    process (RSS) or device (NVML) holds on the right, on its own scale."""
    import textwrap

    import matplotlib.pyplot as plt

    outer = {k: v for k, v in bars.items() if k.startswith(("process", "device"))}
    inner = {k: v for k, v in bars.items() if k not in outer}
    if not outer:
        fig, ax = plt.subplots(figsize=(max(6.5, 1.9 * len(inner) + 3), 4.2))
        stacked_bars(inner, title="\n".join(w for line in title.split("\n") for w in textwrap.wrap(line, 70)), ax=ax)
        return fig
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10.5, 4.4), gridspec_kw={"width_ratios": [len(inner), 1.4]})
    stacked_bars(inner, ax=a1, legend=False, title="torch's allocator")
    stacked_bars(outer, ax=a2, legend=False, title="the whole " + ("device" if "device" in next(iter(outer)) else "process"))
    labels: dict = {}
    for ax in (a1, a2):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            labels.setdefault(lab, h)
    fig.legend(list(labels.values()), list(labels), fontsize=8, loc="upper left", bbox_to_anchor=(0.8, 0.88))
    fig.suptitle("\n".join(w for line in title.split("\n") for w in textwrap.wrap(line, 90)), fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    return fig


def bars_table(bars: dict[str, dict[str, float]]):
    """The bars as a table: one row per component, one column per bar (MiB, to 4 significant digits; '–' where a
    bar has no such component)."""
    import math

    import pandas as pd

    from perflab.core.readout import num

    rows = [{"bar": k.replace("\n", " "), "component": c, "MiB": v / MiB} for k, parts in bars.items() for c, v in parts.items()]
    df = pd.DataFrame(rows).pivot_table(index="component", columns="bar", values="MiB", sort=False)
    df.loc["total"] = df.sum()
    df = df[[k.replace("\n", " ") for k in bars]]
    df.columns = [f"{c} (MiB)" for c in df.columns]
    return df.map(lambda v: "–" if v is None or (isinstance(v, float) and math.isnan(v)) else num(v, 4))


def step_anatomy(report, est, *, title: str = ""):
    """The estimate's sum of parts beside a measured step (`step_bars`): the figure and its table."""
    bars = {"predicted\n(sum of parts)": dict(est.components), **step_bars(report)}
    return step_figure(bars, title=title), bars_table(bars)


def zero_stages_figure(params: float, dp: int, *, precision: str = "mixed", grad_dtype: str | None = "fp16",
                       optimizer: str = "adamw"):
    """Model states per GPU for ZeRO stages 0–3 (the ZeRO paper's Figure 1 for 7.5B on 64 GPUs)."""
    bars = {}
    for z, name in enumerate(["0: baseline", "1: P_os", "2: P_os+g", "3: P_os+g+p"]):
        e = estimate(params, precision=precision, grad_dtype=grad_dtype, optimizer=optimizer, zero=z, dp=dp)
        bars[f"ZeRO {name}"] = dict(e.components)
    return stacked_bars(bars, title=f"model states per GPU: {params / 1e9:g}B parameters, {precision} precision, "
                                    f"{optimizer}, data-parallel degree {dp}", unit=(GB, "GB (1e9 bytes)"))


def activations_vs_seq_figure(h: int, a: int, *, b: int = 1, t: int = 8, seqs=None, L: int | None = None):
    """Korthikanti et al.'s Table 2 per-layer activation memory against sequence length."""
    import matplotlib.pyplot as plt

    seqs = seqs or [2**k for k in range(9, 16)]
    rows = [("no parallelism", 1, False, "none"), (f"TP t={t}", t, False, "none"), (f"TP+SP t={t}", t, True, "none"),
            (f"TP t={t} + selective", t, False, "selective"), (f"TP+SP t={t} + selective", t, True, "selective"),
            ("full recompute", t, True, "full")]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, tt, sp, rc in rows:
        ys = [activations_per_layer_bytes(s, b, h, a, t=tt, sp=sp, recompute=rc) * (L or 1) / GB for s in seqs]
        ax.plot(seqs, ys, "o-", label=name, markersize=3)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length s (tokens)")
    ax.set_ylabel(f"activations {'of all ' + str(L) + ' layers' if L else 'per layer'} (GB, 1e9 bytes)")
    ax.set_title(f"Korthikanti et al. 2022, Table 2: h={h}, a={a}, b={b}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def phases_figure(report):
    """Measured end-of-phase and peak bytes for each phase, with the prediction as markers."""
    import matplotlib.pyplot as plt

    rows, pred = report.rows, report.predicted
    labels = [r["phase"] + (f" {r['iteration']}" if r["iteration"] else "") for r in rows]
    top = max(max(r["peak_bytes"] for r in rows), max(p.peak_bytes for p in pred))
    div, uname = _unit(top)
    fig, ax = plt.subplots(figsize=(9, 4.2))
    x = range(len(rows))
    ax.bar([i - 0.2 for i in x], [r["allocated_bytes"] / div for r in rows], width=0.4, color="#4C72B0",
           label="measured: alive at the end")
    ax.bar([i + 0.2 for i in x], [r["peak_bytes"] / div for r in rows], width=0.4, color="#C44E52",
           label="measured: peak inside the phase")
    ax.scatter([i - 0.2 for i in x], [p.end_bytes / div for p in pred], marker="_", s=400, color="black", zorder=3,
               label="predicted")
    ax.scatter([i + 0.2 for i in x], [p.peak_bytes / div for p in pred], marker="_", s=400, color="black", zorder=3)
    if rows and rows[0].get("reserved_bytes") is not None:
        ax.plot(list(x), [r["reserved_bytes"] / div for r in rows], "s--", color="#DA8BC3", label="reserved by the cache")
    ax.set_xticks(list(x), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"bytes allocated since the start ({uname})")
    m = report.meta
    ax.set_title(f"{m['model']} b={m['batch']} s={m['seq']} {m['dtype']} {m['optimizer']}"
                 f"{' + checkpointing' if m['checkpointing'] else ''} on {m['device']}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def timeline_figure(report):
    """Bytes alive after every allocation and free (CPU: from the profiler's memory events), with
    the phases shaded and each phase's predicted peak drawn as a dashed segment."""
    import matplotlib.pyplot as plt

    tl = report.meta.get("timeline")
    if not tl or not tl[0]:
        raise InputError("no allocation timeline for this device (the CPU run records one; on a GPU use "
                         "perflab.memory.gpu.step_snapshot and pytorch.org/memory_viz)")
    t, alive = tl
    t0 = t[0]
    div, uname = _unit(max(alive))
    fig, ax = plt.subplots(figsize=(9, 3.8))
    ax.step([(x - t0) / 1e6 for x in t], [a / div for a in alive], where="post", linewidth=1, color="black",
            label="measured (torch's allocator)")
    ranges = report.meta.get("phase_ranges") or []
    palette = ["#e8eef7", "#f7e8e8", "#e8f4ea", "#f3ecf7", "#f7f3e8"]
    for k, ((a0, a1), p) in enumerate(zip(ranges, report.predicted)):
        ax.axvspan((a0 - t0) / 1e6, (a1 - t0) / 1e6, color=palette[k % len(palette)], zorder=0)
        ax.hlines(p.peak_bytes / div, (a0 - t0) / 1e6, (a1 - t0) / 1e6, colors="tab:red", linestyles="--", linewidth=1,
                  label="predicted peak of the phase" if k == 0 else "_nolegend_")
        short = {"build": "build", "forward": "fwd", "backward": "bwd", "optimizer step": "step", "zero_grad": "zero"}
        ax.text(((a0 + a1) / 2 - t0) / 1e6, 0, (short.get(p.phase) or p.phase) + (f" {p.iteration}" if p.iteration else ""),
                ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel(f"allocated ({uname})")
    ax.set_title("every allocation and free of the run", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def step_timeline(report):
    """The run's allocation timeline (`timeline_figure`) where it was recorded (a CPU); on a GPU, a line saying
    where the allocator's history is (section 10's memory snapshot) instead, and None."""
    if report.on_gpu:
        print("On a GPU the allocator's history over a step is recorded in section 10 (memory snapshot).")
        return None
    return timeline_figure(report)


def step_bars(report, est=None) -> dict[str, dict[str, float]]:
    """The stacked bars for one measured run: predicted (sum of parts + the phase model's
    transients), measured by torch's allocator (parts at phase boundaries + what the peak adds), and
    what the process or device holds (RSS, or reserved and NVML used)."""
    comps = report.components()
    peak = report.peak_bytes
    pred = report.predicted
    last = max(p.iteration for p in pred)
    p_fwd = next(p for p in pred if p.phase == "forward" and p.iteration == last)
    p_bwd = next(p for p in pred if p.phase == "backward" and p.iteration == last)
    predicted = {"weights": p_fwd.parts["weights"] + p_fwd.parts["batch"], "gradients": p_bwd.parts["gradients"],
                 "optimizer_states": p_fwd.parts["optimizer_states"], "activations": p_fwd.parts["activations"]}
    predicted["peak − sum of parts"] = report.predicted_peak_bytes - sum(predicted.values())
    measured = {"weights": comps["weights + batch"], "gradients": comps["gradients"],
                "optimizer_states": comps["optimizer states"], "activations": comps["activations"]}
    measured["peak − sum of parts"] = peak - sum(measured.values())
    bars = {"predicted peak\n(phase model)": predicted, "measured peak\n(torch allocator)": measured}
    peak_row = max(report.rows, key=lambda r: r["peak_bytes"])
    if peak_row.get("reserved_bytes") is not None:
        used = peak_row.get("device_used_bytes") or peak_row.get("driver_used_bytes")
        dev = {"allocated at the peak": peak, "allocator cache (reserved − allocated)": peak_row["reserved_peak_bytes"] - peak}
        if used:
            dev["CUDA context, kernels, other processes"] = used - peak_row["reserved_peak_bytes"]
        bars["device\n(NVML used)"] = dev
    elif peak_row.get("rss_peak_bytes"):
        bars["process\n(peak RSS)"] = {"allocated at the peak": peak, "outside torch's allocator": peak_row["rss_peak_bytes"] - peak}
    return bars


def checkpointing_figure(out: CheckpointingEffect):
    """Activation memory (predicted and measured) and step time with and without recomputation."""
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.6))
    sides = [out.stored, out.checkpointed]
    div, uname = _unit(out.stored.activation_bytes)
    a1.bar([0, 1], [s.activation_bytes / div for s in sides], color=["#C44E52", "#4C72B0"], width=0.6,
           label="measured")
    a1.scatter([0, 1], [s.predicted_bytes / div for s in sides], marker="_", s=600, color="black", zorder=3,
               label="predicted")
    a1.set_xticks([0, 1], ["all activations stored", "blocks recomputed"])
    a1.set_ylabel(f"activations kept by the forward ({uname})")
    a1.set_title("allocator's count", fontsize=9)
    a1.legend(fontsize=8)
    med = [s.step_s * 1e3 for s in sides]
    err = [[m - s.step_q25_s * 1e3 for m, s in zip(med, sides)],
           [s.step_q75_s * 1e3 - m for m, s in zip(med, sides)]]
    a2.bar([0, 1], med, yerr=err, color=["#C44E52", "#4C72B0"], width=0.6, capsize=4)
    a2.axhline(out.stored.step_s * 1e3 * out.flop_ratio, color="black", linestyle="--", linewidth=1,
               label="stored × 4/3 (one more forward)")
    a2.set_xticks([0, 1], ["stored", "recomputed"])
    a2.set_ylabel("forward + backward (ms)")
    a2.set_title("median; error bars: quartiles", fontsize=9)
    a2.legend(fontsize=8)
    fig.suptitle(f"gradient checkpointing: {out.model} b={out.batch} s={out.seq} {out.dtype} "
                 f"on {out.device}", fontsize=10, y=0.99)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- the widget's view


@lru_cache(maxsize=32)
def _measured(model: str, batch: int, seq: int, precision: str, optimizer: str, checkpointing: bool, device: str):
    """One measured step per setting in this Python process: dragging back to a setting redraws at once."""
    from perflab.memory.probe import measure_step_phases
    from perflab.workload.models import preset

    return measure_step_phases(preset(model), batch=batch, seq=seq, dtype=precision, optimizer=optimizer,
                               checkpointing=checkpointing, device=device)

def _predicted_measure_s(cfg, batch: int, seq: int, checkpointing: bool, device, dtype: str) -> float:
    """At least how long `_measured` takes: the two training steps `measure_step_phases` runs, each
    its exact FLOPs at this device's matmul rate (`perflab.flops.step.predicted_step_s`)."""
    from perflab.flops.step import predicted_step_s

    return 2 * predicted_step_s(cfg, batch, seq, checkpointing, device, dtype)[0]


PANEL_MODELS = ["tiny-gpt", "tiny-llama", "small-gpt", "small-llama", "gpt2-small", "gpt2-medium", "gpt2-xl",
                "llama2-7b", "llama2-13b", "llama2-70b", "gpt3-175b"]


def memory_view(model: str = "small-gpt", batch: int = 4, seq: int = 256, precision: str = "fp32",
                optimizer: str = "adamw", zero: int = 0, dp: int = 1, recompute: str = "none", *,
                device=None, measure: bool = True, measure_budget_bytes: float = 1.5 * GiB,
                measure_budget_s: float = 10.0):
    """Prediction for a model/batch/precision/optimizer/ZeRO/recompute choice, next to a
    measurement of one training step when this device can run it (returns (Figure, DataFrame)).

    Measured when: the precision is fp32 or bf16 (pure), the optimizer is one torch ships
    (adamw, adamw-fused, sgd), ZeRO is 0 (one device), recompute is none or full, and the predicted
    peak fits `measure_budget_bytes` and the free memory, and the step is not predicted to take more
    than `measure_budget_s` (its exact FLOPs at this device's matmul rate: `perflab.flops.step`).
    Otherwise the prediction stands alone and the title says why.
    """
    from perflab.memory.estimate import MEASURED_OPTIMIZERS, precision_of
    from perflab.workload.models import preset

    cfg = preset(model)
    precision_of(precision)
    if seq > cfg.seq_len:
        raise InputError(f"seq={seq} is longer than {model}'s context of {cfg.seq_len}: choose seq ≤ {cfg.seq_len}")
    act_model = "paper" if recompute == "selective" else "perflab"
    est = estimate(cfg=cfg, precision=precision, optimizer=optimizer, zero=zero, dp=dp, batch=batch, seq=seq,
                   recompute=recompute, activation_model=act_model)
    bars: dict[str, dict[str, float]] = {"predicted\n(sum of parts)": dict(est.components)}
    why = None
    report = None
    if not measure:
        why = "measurement off"
    elif precision not in ("fp32", "bf16"):
        why = "mixed precision: prediction only (measure fp32 or bf16 here)"
    elif optimizer not in MEASURED_OPTIMIZERS:
        why = f"{optimizer}: prediction only (torch ships adamw, adamw-fused, sgd)"
    elif zero or dp > 1:
        why = "ZeRO/data parallelism needs several GPUs: prediction only"
    elif recompute == "selective":
        why = "selective recompute: prediction only (perflab's model recomputes whole blocks)"
    else:
        from perflab.core.device import pick_device

        dev = pick_device(device) if device is None or isinstance(device, str) else device
        phases = _step_phases(cfg, batch, seq, dtype=precision, optimizer=optimizer, recompute=recompute,
                              device=dev.type)
        need = max(p.peak_bytes for p in phases)
        if need > measure_budget_bytes:
            why = f"too large to measure in a slider ({need / GiB:.2f} GiB > {measure_budget_bytes / GiB:.2f} GiB): prediction only"
        elif (step_s := _predicted_measure_s(cfg, batch, seq, recompute == "full", dev, precision)) > measure_budget_s:
            why = (f"too slow to measure in a slider (at least {step_s:.2g} s here): prediction only; "
                   f"`perflab memory --measure --preset {model} --batch {batch} --seq {seq}` measures it")
        else:
            report = _measured(model, batch, seq, precision, optimizer, recompute == "full", str(dev))
            bars.update(step_bars(report))
    title = (f"{model}: b={batch}, s={seq}, {precision}, {optimizer}, ZeRO-{zero} over dp={dp}, recompute {recompute}"
             + (f"\n{why}" if why else ""))
    return step_figure(bars, title=title), bars_table(bars)
