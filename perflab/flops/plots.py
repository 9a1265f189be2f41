"""Figures and panels of the MFU lesson (notebook 02). Each function computes or takes data and
returns a Figure (or a Figure and a table); every axis says its unit. The widget panels in the
notebook only wire sliders to `conventions_dashboard` and `step_dashboard`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib

matplotlib.rcParams.setdefault("figure.dpi", 100)


def _fig(size=(8, 4), ncols=1):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=size)
    return fig, axes


def _known(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x)) and x > 0


# ---------------------------------------------------------------- conventions


def conventions_bars(df, title: str = ""):
    """FLOPs per token of each convention as a difference from the exact model count (%)."""
    fig, ax = _fig((8, 3.6))
    d = df.reset_index()
    colors = ["tab:orange" if k == "hardware" else "tab:blue" for k in d["kind"]]
    y = list(range(len(d)))[::-1]
    vals = [100 * v for v in d["vs_exact_model"]]
    ax.barh(y, vals, color=colors)
    lo, hi = min(vals + [0]), max(vals + [0])
    span = max(hi - lo, 1)
    for yi, v, f in zip(y, vals, d["flops_per_token"]):
        ax.text(max(v, 0) + 0.01 * span, yi, f"{v:+.1f}%  ({f:.3g} FLOPs/token)", va="center", ha="left", fontsize=8)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks(y, d["convention"])
    ax.set_xlim(lo - 0.05 * span - 1, hi + 0.9 * span + 1)
    ax.set_xlabel("FLOPs per token vs the exact model count (%)")
    ax.set_title(title or "FLOPs per token by convention (blue: model, orange: hardware FLOPs)", fontsize=10)
    fig.tight_layout()
    return fig


def style_conventions(df):
    """The conventions table with the differences highlighted (>1%: amber, >10%: red)."""
    show = df[["flops_per_token", "flops_per_step", "vs_exact_model", "kind", "counts", "source"]].copy()

    def colour(v):
        a = abs(v)
        return "background-color: #f8c9c4" if a > 0.10 else ("background-color: #fde9b8" if a > 0.01 else "")

    return (show.style.format({"flops_per_token": "{:.4g}", "flops_per_step": "{:.4g}", "vs_exact_model": "{:+.2%}"})
            .map(colour, subset=["vs_exact_model"]))


def conventions_dashboard(model: str = "gpt2-small", seq: int = 1024, batch: int = 8, checkpointing: bool = False):
    """Widget body: (bar chart, highlighted table) of every convention for a preset, s and b."""
    from perflab.flops.transformer import conventions_frame
    from perflab.workload.models import preset

    cfg = preset(model)
    if seq > cfg.seq_len:
        cfg = cfg.with_(seq_len=seq)
    df = conventions_frame(cfg, seq, batch, checkpointing=checkpointing)
    fig = conventions_bars(df, f"{model}, s={seq}: FLOPs per token by convention")
    return fig, style_conventions(df)


# ---------------------------------------------------------------- a measured step


def mfu_hfu_bars(reports: Sequence, labels: Sequence[str] | None = None, title: str = ""):
    """MFU and HFU of each measured step, against the spec (or estimated) peak and the measured ceiling."""
    import numpy as np

    fig, ax = _fig((8, 4))
    labels = list(labels or [("checkpointing" if r.checkpointing else "no checkpointing") for r in reports])
    series = [("MFU · peak", "mfu_spec", "tab:blue", None), ("HFU · peak", "hfu_spec", "tab:blue", "//"),
              ("MFU · ceiling", "mfu_ceiling", "tab:green", None), ("HFU · ceiling", "hfu_ceiling", "tab:green", "//")]
    x = np.arange(len(reports))
    w = 0.2
    top = 0.0
    for j, (name, attr, color, hatch) in enumerate(series):
        vals = [getattr(r, attr) for r in reports]
        ys = [100 * v if _known(v) else 0 for v in vals]
        top = max([top] + ys)
        bars = ax.bar(x + (j - 1.5) * w, ys, w, label=name, color=color, hatch=hatch, edgecolor="white", alpha=0.9)
        for b, v, r in zip(bars, vals, reports):
            busy = attr.endswith("ceiling") and getattr(r, "ceiling_verdict", None)
            ax.text(b.get_x() + b.get_width() / 2, b.get_height(),
                    f"{100 * v:.1f}" if _known(v) else ("busy" if busy else "n/a"), ha="center", va="bottom", fontsize=7)
    r0 = reports[0]
    peak = f"{'estimated' if r0.peak_source == 'estimate' else 'spec'} peak {r0.peak_tflops:.3g} TFLOP/s" if r0.peak_tflops else "peak unknown"
    ceil = ("ceiling measured on a busy machine: no MFU against it" if getattr(r0, "ceiling_verdict", None) else
            f"ceiling {r0.ceiling_tflops:.3g} TFLOP/s" if r0.ceiling_tflops else "ceiling not measured")
    ax.set_xticks(x, labels)
    ax.set_ylabel("utilization (% of the denominator)")
    ax.set_ylim(0, max(top * 1.3, 1))
    ax.set_title(title or f"{r0.model} on {r0.device_name} ({r0.dtype}): {peak}, {ceil}", fontsize=10)
    ax.legend(fontsize=8, ncol=2, loc="upper right")
    fig.tight_layout()
    return fig


def phase_bars(reports: Sequence, labels: Sequence[str] | None = None, title: str = ""):
    """Where a step's time goes: forward, backward (with any recomputation) and optimizer, in ms."""
    fig, ax = _fig((8, 2.5 + 0.5 * len(reports)))
    labels = list(labels or [("checkpointing" if r.checkpointing else "no checkpointing") for r in reports])
    y = list(range(len(reports)))[::-1]
    left = [0.0] * len(reports)
    for name, attr, color in (("forward", "forward_s", "tab:blue"), ("backward", "backward_s", "tab:orange"),
                              ("optimizer", "optimizer_s", "tab:green")):
        vals = [1e3 * getattr(r, attr) for r in reports]
        ax.barh(y, vals, left=left, color=color, label=name)
        for yi, lft, v in zip(y, left, vals):
            if v > 0:
                ax.text(lft + v / 2, yi, f"{v:.1f}", ha="center", va="center", fontsize=8, color="white")
        left = [a + b for a, b in zip(left, vals)]
    for yi, r, lft in zip(y, reports, left):
        ax.text(lft, yi, f"  bwd/fwd = {r.backward_s / r.forward_s:.2f}" if r.forward_s else "", va="center", fontsize=8)
    ax.set_yticks(y, labels)
    ax.set_xlim(0, max(left) * 1.3 if max(left) else 1)
    ax.set_xlabel("median time per step (ms)")
    ax.set_title(title or "forward vs backward vs optimizer")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=3, frameon=False)
    fig.tight_layout()
    return fig


_STEP_OVER_MATMUL: dict[str, float] = {}  # device → measured step / FLOP-at-matmul-rate prediction


def forget_measured_steps() -> None:
    """Forget how much slower than its FLOPs at a matmul's rate the panel has seen a step run: its next
    prediction is the FLOP bound alone, as before any step was measured in this process."""
    _STEP_OVER_MATMUL.clear()


def step_dashboard(model: str = "tiny-gpt", seq: int = 64, batch: int = 4, checkpointing: bool = False, *,
                   device=None, steps: int = 3, ceiling=True, ceiling_size: int | None = None,
                   budget_s: float | None = 10.0):
    """Widget body: measure one configuration's step and show its MFU/HFU against both denominators,
    plus a one-row table of the numbers (`perflab.flops.step.steps_frame`). `ceiling` is what
    `measure_step` takes: the lesson passes the basis it measured once, so every setting divides by it.

    `budget_s`: a configuration whose steps (one warm-up plus `steps`) are predicted to take longer
    than this is refused in one line, with the largest batch that fits and the command that
    measures it anyway (gpt2-small at batch 64 × 1024 tokens is minutes per step on a laptop CPU);
    None measures anything."""
    import torch

    from perflab.core.device import pick_device
    from perflab.core.errors import InputError
    from perflab.flops.step import measure_step, predicted_step_s, steps_frame
    from perflab.workload.models import preset
    from perflab.workload.train import default_dtype

    cfg = preset(model)
    if seq > cfg.seq_len:
        raise InputError(f"seq={seq} is longer than {model}'s context of {cfg.seq_len}: choose seq ≤ {cfg.seq_len}")
    dev = torch.device(device) if device is not None else pick_device()
    raw_s, rate, flops = predicted_step_s(cfg, batch, seq, checkpointing, dev, default_dtype(dev))
    step_s = raw_s * _STEP_OVER_MATMUL.get(str(dev), 1.0)  # as much slower as the last step measured here
    if budget_s is not None:
        total = step_s * (steps + 1)
        if total > budget_s:
            fits = int(batch * budget_s / total)
            what = f"choose batch ≤ {fits}" if fits >= 1 else "choose a shorter sequence or a smaller model"
            raise InputError(f"{model} at batch {batch} × seq {seq} is {flops / 1e12:.3g} TFLOP per step: about "
                             f"{step_s:.2g} s per step here ({rate:.3g} TFLOP/s, a matmul's rate, and the last step "
                             f"measured here), {total:.2g} s for "
                             f"{steps + 1} steps: {what}, or measure it with `perflab mfu --measure --preset {model} "
                             f"--batch {batch} --seq {seq}`")
    r = measure_step(cfg, batch=batch, seq=seq, steps=steps, warmup=1, checkpointing=checkpointing, device=device,
                     ceiling=ceiling, ceiling_size=ceiling_size, verify=False)
    # a step is slower than its FLOPs at a matmul's rate (small ops, the LM head's softmax): remember by
    # how much on this device, so the next prediction is closer (never below the matmul bound)
    _STEP_OVER_MATMUL[str(dev)] = max(1.0, r.step_s / raw_s)
    label = f"{model} b={batch} s={seq}" + (" + ckpt" if checkpointing else "")
    return mfu_hfu_bars([r], [label]), steps_frame([r], [label])


# ---------------------------------------------------------------- time series, accumulation, published runs


def step_time_series(series: Sequence, title: str = ""):
    """Step time (ms) against step index for each GC mode; full (generation-2) collections marked
    with their measured duration."""
    fig, ax = _fig((9, 3.8))
    from matplotlib.ticker import ScalarFormatter

    colors = ["tab:red", "tab:blue", "tab:green", "tab:purple"]
    for k, (s, c) in enumerate(zip(series, colors)):
        ms = [1e3 * t for t in s.step_s]
        ax.plot(range(len(ms)), ms, "o-", ms=3, color=c, label=f"{s.mode} (median {1e3 * s.median_s:.1f} ms)")
        for step, gen, dur in s.collections:
            if gen == 2 and 0 <= step < len(ms):
                ax.plot([step], [ms[step]], marker="x", color="black", ms=9)
                ax.annotate(f"full GC {1e3 * dur:.0f} ms", (step, ms[step]), textcoords="offset points",
                            xytext=(4, 6 + 11 * k), fontsize=7, color=c)
    ax.set_xlabel("training step")
    ax.set_ylabel("step time (ms, log scale)")
    from matplotlib.ticker import LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(NullFormatter())
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi * 1.6)
    ax.set_title(title or "step time with Python's GC on vs off (× = a full collection inside that step)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def grad_accum_prediction(df):
    """`perflab.flops.step.grad_accum_prediction` (the model's home)."""
    from perflab.flops.step import grad_accum_prediction as predict

    return predict(df)


def grad_accum_plot(df, title: str = ""):
    """Tokens/s against gradient-accumulation steps (measured, and predicted from the GAS = 1 step
    if only the optimizer's time were saved), with the optimizer's share of the step."""
    fig, ax = _fig((7, 3.6))
    ax.plot(df["gas"], df["tokens_per_s"], "o-", color="tab:blue", label="measured")
    ax.plot(df["gas"], grad_accum_prediction(df), ":", color="tab:blue", label="predicted: optimizer time amortized")
    ax.legend(fontsize=8, loc="lower left")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(df["gas"]), [str(g) for g in df["gas"]])
    ax.set_xlabel("gradient-accumulation steps (micro-batches per optimizer step)")
    ax.set_ylabel("throughput (tokens/s)", color="tab:blue")
    ax.set_ylim(0, df["tokens_per_s"].max() * 1.25)
    ax2 = ax.twinx()
    share = 100 * df["optimizer_s"] / df["step_s"]
    ax2.plot(df["gas"], share, "s--", color="tab:green", label="optimizer share of step")
    ax2.set_ylabel("optimizer step (% of step time)", color="tab:green")
    ax2.set_ylim(0, max(share.max() * 1.3, 1))
    ax.set_title(title or "gradient accumulation amortizes the optimizer step")
    fig.tight_layout()
    return fig


def published_plot(df, title: str = ""):
    """Published utilization figures against perflab's recomputation from the papers' inputs (%)."""
    d = df[df["unit"] == "fraction"].reset_index(drop=True)
    fig, ax = _fig((9, 0.8 + 0.32 * len(d)))
    y = list(range(len(d)))[::-1]
    ax.barh([v + 0.2 for v in y], 100 * d["published"], height=0.38, color="tab:gray", label="published")
    ax.barh([v - 0.2 for v in y], 100 * d["perflab"], height=0.38, color="tab:blue", label="perflab, from the paper's inputs")
    for yi, p, c in zip(y, d["published"], d["perflab"]):
        ax.text(100 * max(p, c) + 0.5, yi, f"{100 * p:.1f} | {100 * c:.2f}", va="center", fontsize=7)
    ax.set_yticks(y, [f"{r} — {q}" for r, q in zip(d["run"], d["quantity"])], fontsize=7)
    ax.set_xlabel("utilization (%)")
    ax.set_xlim(0, 100 * max(d["published"].max(), d["perflab"].max()) * 1.75)
    ax.set_title(title or "published MFU/HFU recomputed by perflab")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig
