"""Figures of lesson 10. Each function takes measured data and returns a Figure; every axis says
its unit."""

from __future__ import annotations

import matplotlib

matplotlib.rcParams.setdefault("figure.dpi", 100)


def loss_curves(par, *, title: str = "", unsafe=None):
    """Eager and compiled training losses per step overlaid (left), and the per-step relative
    difference against the tolerance on a log scale (right). `par`: a `parity.Parity`;
    `unsafe`: optionally a second Parity (e.g. the bf16 cast) drawn on the right for contrast."""
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    steps = list(range(1, len(par.eager) + 1))
    ax.plot(steps, par.eager, "o-", color="tab:blue", label="eager", linewidth=2.5, markersize=7)
    ax.plot(steps, par.compiled, "x--", color="tab:orange", label="compiled", linewidth=1.5, markersize=8)
    ax.set_xlabel("training step")
    ax.set_ylabel("loss (nats per token)")
    ax.set_title("loss: eager and compiled overlaid")
    ax.set_xticks(steps)
    ax.legend()
    floor = 1e-10  # a bit-equal step (difference 0) is drawn at the floor of the log axis
    zero = " (0: drawn at 1e-10)" if any(d == 0 for d in par.rel_diff) else ""
    ax2.semilogy(steps, [max(d, floor) for d in par.rel_diff], "o-", color="tab:orange",
                 label=f"compiled vs eager{zero}")
    if unsafe is not None:
        ax2.semilogy(steps, [max(d, floor) for d in unsafe.rel_diff], "s-", color="tab:red",
                     label="compiled, bf16 cast vs eager")
    ax2.axhline(par.tol, color="black", linestyle=":", label=f"tolerance {par.tol:.0e}")
    ax2.set_xlabel("training step")
    ax2.set_ylabel("|Δloss| / |eager loss| (relative)")
    ax2.set_title("per-step relative difference")
    ax2.set_xticks(steps)
    ax2.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
