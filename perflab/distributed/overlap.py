"""Can communication hide behind computation? The ratio t_comm / t_compute for DP, ZeRO-3, TP and PP.

Source: the Ultra-Scale Playbook (nanotron / Hugging Face), section "A3: the math for
compute/communication overlap", huggingface.co/spaces/nanotron/ultrascale-playbook. Every function
returns an `Overlap` with both times, their ratio (≤ 1: the communication can be hidden) and
the closed form it reduces to. Shapes use the course's letters: h hidden size, s sequence length,
b micro-batch, L layers; a transformer block has 16h² parameters (attention 4h², gated MLP 12h²).

Two deliberate differences from the playbook's printed formulas, both tested:
* **Bytes.** The playbook counts elements as if each were one byte. perflab multiplies by
  `bytes_per_element` (2 for bf16, the default), so its communication times (and ratios) are
  twice the playbook's for bf16; `bytes_per_element=1` reproduces the playbook's numbers.
* **DP.** The playbook's DP ratio is printed as num_params/(2·num_tokens)·(DP−1)/DP·peak_flops/peak_bw,
  but its own t_comm and t_compute give (DP−1)/DP · peak_flops / (2·num_tokens·peak_bw): the
  parameter count cancels (all gradients move while the whole backward runs; equally, one 25 MB
  bucket moves while the backward of those 25 MB of parameters runs). perflab uses the latter.

Bandwidth is per direction (the `per_direction_gbps` of perflab/distributed/data/interconnects.json, the
figure nccl-tests' busbw is compared with); peak FLOP/s is the dense figure from the hardware table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, package_json, to_json
from perflab.core.validate import positive_int

STRATEGIES = ("DP", "ZeRO-3", "TP", "PP")
DDP_BUCKET_BYTES = 25 * 2**20  # DDP's default bucket_cap_mb=25


# ----------------------------------------------------------------------------- hardware inputs
@dataclass(frozen=True)
class Link:
    id: str
    name: str
    scope: str
    datasheet_gbps: float
    per_direction_gbps: float
    source: str
    derivation: str


@lru_cache(maxsize=1)
def links() -> tuple[Link, ...]:
    """Interconnects with their datasheet figures (perflab/distributed/data/interconnects.json)."""
    return tuple(Link(**row) for row in package_json("perflab.distributed", "interconnects.json")["links"])


def link(link_id: str) -> Link:
    for x in links():
        if x.id == link_id:
            return x
    raise InputError(f"unknown link {link_id!r}: use one of {', '.join(x.id for x in links())}")


@dataclass(frozen=True)
class Hardware:
    """What the ratios need: dense peak FLOP/s and link bandwidth per direction."""

    peak_tflops: float
    link_gbps: float
    label: str = ""

    @property
    def peak_flops(self) -> float:
        return self.peak_tflops * 1e12

    @property
    def bw_bytes_per_s(self) -> float:
        return self.link_gbps * 1e9

    @property
    def flops_per_byte(self) -> float:
        """peak_flops / peak_bw: FLOPs the chip can do while one byte crosses the link."""
        return self.peak_flops / self.bw_bytes_per_s


def hardware(accelerator: str | None = "h100-sxm", link_id: str | None = "nvlink4-h100", *, dtype: str = "bf16",
             peak_tflops: float | None = None, link_gbps: float | None = None) -> Hardware:
    """Peak from the accelerator table (`perflab.core.hardware.spec_peak`, or `peak_tflops`), bandwidth
    from the link table (or `link_gbps`)."""
    from perflab.core.hardware import spec_peak

    label = []
    if peak_tflops is None:
        if not accelerator:
            raise InputError("give an accelerator id (e.g. h100-sxm) or peak_tflops")
        peak = spec_peak(accelerator, dtype)
        if peak.spec is None:
            raise InputError(f"unknown accelerator {accelerator!r}: see perflab.core.hardware.accelerators()")
        peak_tflops = peak.tflops
        if not peak_tflops:
            raise InputError(f"{peak.spec.name} has no dense {dtype} peak in the table: choose another dtype or give "
                             "peak_tflops")
        label.append(f"{peak.spec.name} {dtype} {peak_tflops:g} TFLOP/s")
    else:
        label.append(f"{peak_tflops:g} TFLOP/s")
    if link_gbps is None:
        if not link_id:
            raise InputError("give a link id (e.g. nvlink4-h100) or link_gbps")
        lk = link(link_id)
        link_gbps = lk.per_direction_gbps
        label.append(f"{lk.name} {link_gbps:g} GB/s per direction")
    else:
        label.append(f"{link_gbps:g} GB/s")
    for name, v in (("peak_tflops", peak_tflops), ("link_gbps", link_gbps)):
        if not (isinstance(v, (int, float)) and v > 0):
            raise InputError(f"{name} must be a positive number (got {v!r})")
    return Hardware(float(peak_tflops), float(link_gbps), ", ".join(label))


# ----------------------------------------------------------------------------- the four ratios
@dataclass
class Overlap:
    """One strategy's communication against the computation it can hide behind."""

    strategy: str
    comm: str  # what moves
    compute: str  # what runs meanwhile
    comm_bytes: float  # per rank
    compute_flops: float  # per rank
    t_comm_s: float
    t_compute_s: float
    closed_form: str
    ratio_closed_form: float  # the closed form evaluated: equals ratio (a test checks)

    JSON_EXTRA = ("ratio", "hidden")

    @property
    def ratio(self) -> float:
        return self.t_comm_s / self.t_compute_s if self.t_compute_s else float("inf")

    @property
    def hidden(self) -> bool:
        """Can the communication be fully overlapped with the computation (ratio ≤ 1)?"""
        return self.ratio <= 1.0

    def as_dict(self) -> JSON:
        """This strategy's entry in `perflab overlap --json`: its fields, then `ratio` and `hidden`."""
        return to_json(self)


def _bpe(bytes_per_element) -> int:
    if bytes_per_element not in (1, 2, 4):
        raise InputError(f"bytes_per_element must be 1, 2 or 4 (got {bytes_per_element!r}): 2 for bf16/fp16, 4 for fp32")
    return int(bytes_per_element)


def dp(h: int, layers: int, seq: int, mbs: int, dp: int, hw: Hardware, *, bytes_per_element: int = 2) -> Overlap:
    """Data parallel (ZeRO-0): all-reduce every gradient while the backward pass runs.

    comm: the ring all-reduce of num_params = L·16h² gradients moves 2(DP−1)/DP × their bytes per rank.
    compute: the backward pass, 4 · num_tokens · num_params FLOPs (num_tokens = s·b).
    ratio = (DP−1)/DP · peak_flops / (2 · num_tokens · peak_bw) · bytes_per_element.
    """
    h, layers, seq, mbs, dp = (positive_int(n, v) for n, v in (("h", h), ("layers", layers), ("seq", seq), ("mbs", mbs), ("dp", dp)))
    bpe = _bpe(bytes_per_element)
    params = layers * 16 * h * h
    tokens = seq * mbs
    comm_bytes = 2 * (dp - 1) / dp * params * bpe
    flops = 4 * tokens * params
    closed = (dp - 1) / dp * hw.peak_flops / (2 * tokens * hw.bw_bytes_per_s) * bpe
    return Overlap("DP", f"all-reduce of {params:.3g} gradients (L·16h²), {bpe} B each",
                   f"backward pass: 4·s·b·N = {flops:.3g} FLOPs", comm_bytes, flops,
                   comm_bytes / hw.bw_bytes_per_s, flops / hw.peak_flops,
                   "(DP−1)/DP · peak_flops / (2·s·b·peak_bw) · bytes_per_element", closed)


def dp_bucket(bucket_bytes: int, seq: int, mbs: int, dp: int, hw: Hardware, *, bytes_per_element: int = 2) -> Overlap:
    """The same DP ratio for one DDP bucket: its all-reduce against the backward of its parameters."""
    bucket_bytes = positive_int("bucket_bytes", bucket_bytes)
    tokens = positive_int("seq", seq) * positive_int("mbs", mbs)
    dp = positive_int("dp", dp)
    bpe = _bpe(bytes_per_element)
    params = bucket_bytes / bpe
    comm_bytes = bucket_bytes * 2 * (dp - 1) / dp
    flops = 4 * tokens * params
    closed = (dp - 1) / dp * hw.peak_flops / (2 * tokens * hw.bw_bytes_per_s) * bpe
    return Overlap("DP (one bucket)", f"all-reduce of one {bucket_bytes / 2**20:g} MiB bucket",
                   "backward of that bucket's parameters", comm_bytes, flops,
                   comm_bytes / hw.bw_bytes_per_s, flops / hw.peak_flops,
                   "(DP−1)/DP · peak_flops / (2·s·b·peak_bw) · bytes_per_element", closed)


def zero3(h: int, seq: int, mbs: int, dp: int, hw: Hardware, *, bytes_per_element: int = 2) -> Overlap:
    """ZeRO-3 / FSDP: all-gather the next block's 16h² parameters while this block's forward runs.

    comm: all-gather of 16h² parameters moves (DP−1)/DP × their bytes per rank.
    compute: one decoder block's forward, 2 · s·b · 16h² = 32·s·b·h² FLOPs.
    ratio = (DP−1)/DP · peak_flops / (2·s·b·peak_bw) · bytes_per_element.
    """
    h, seq, mbs, dp = (positive_int(n, v) for n, v in (("h", h), ("seq", seq), ("mbs", mbs), ("dp", dp)))
    bpe = _bpe(bytes_per_element)
    comm_bytes = 16 * h * h * bpe * (dp - 1) / dp
    flops = 32 * seq * mbs * h * h
    closed = (dp - 1) / dp * hw.peak_flops / (2 * seq * mbs * hw.bw_bytes_per_s) * bpe
    return Overlap("ZeRO-3", "all-gather of the next block's 16h² parameters",
                   "forward of one block: 32·s·b·h² FLOPs", comm_bytes, flops,
                   comm_bytes / hw.bw_bytes_per_s, flops / hw.peak_flops,
                   "(DP−1)/DP · peak_flops / (2·s·b·peak_bw) · bytes_per_element", closed)


def tp(h: int, seq: int, mbs: int, tp: int, hw: Hardware, *, bytes_per_element: int = 2) -> Overlap:
    """Tensor parallel: all-gather the s·b·h activations while the next linear layer (h² weights) runs.

    comm: all-gather of s·b·h activations moves (TP−1)/TP × their bytes per rank.
    compute: one h×h linear on this rank's shard, 2·s·b·h²/TP FLOPs.
    ratio = (TP−1)/(2h) · peak_flops / peak_bw · bytes_per_element  (independent of s and b).
    """
    h, seq, mbs, tp = (positive_int(n, v) for n, v in (("h", h), ("seq", seq), ("mbs", mbs), ("tp", tp)))
    bpe = _bpe(bytes_per_element)
    comm_bytes = seq * mbs * h * bpe * (tp - 1) / tp
    flops = 2 * seq * mbs * h * h / tp
    closed = (tp - 1) / (2 * h) * hw.flops_per_byte * bpe
    return Overlap("TP", "all-gather of s·b·h activations", "next linear layer: 2·s·b·h²/TP FLOPs",
                   comm_bytes, flops, comm_bytes / hw.bw_bytes_per_s, flops / hw.peak_flops,
                   "(TP−1)/(2h) · peak_flops / peak_bw · bytes_per_element", closed)


def pp(h: int, seq: int, mbs: int, layers_next_stage: int, hw: Hardware, *, bytes_per_element: int = 2) -> Overlap:
    """Pipeline parallel: send s·b·h activations to the next stage while it computes its blocks.

    comm: a point-to-point send of s·b·h activations.
    compute: the next stage's blocks, 32·s·b·h² FLOPs each.
    ratio = peak_flops / (32 · h · layers_next_stage · peak_bw) · bytes_per_element  (independent of s and b).
    """
    h, seq, mbs, ln = (positive_int(n, v) for n, v in (("h", h), ("seq", seq), ("mbs", mbs),
                                                         ("layers_next_stage", layers_next_stage)))
    bpe = _bpe(bytes_per_element)
    comm_bytes = seq * mbs * h * bpe
    flops = 32 * seq * mbs * h * h * ln
    closed = hw.flops_per_byte / (32 * h * ln) * bpe
    return Overlap("PP", "send of s·b·h activations to the next stage",
                   f"next stage's {ln} block(s): 32·s·b·h² FLOPs each", comm_bytes, flops,
                   comm_bytes / hw.bw_bytes_per_s, flops / hw.peak_flops,
                   "peak_flops / (32·h·layers_next_stage·peak_bw) · bytes_per_element", closed)


def all_four(h: int, layers: int, seq: int, mbs: int, dp_degree: int, tp_degree: int, pp_layers: int, hw: Hardware,
             *, bytes_per_element: int = 2) -> list[Overlap]:
    return [dp(h, layers, seq, mbs, dp_degree, hw, bytes_per_element=bytes_per_element),
            zero3(h, seq, mbs, dp_degree, hw, bytes_per_element=bytes_per_element),
            tp(h, seq, mbs, tp_degree, hw, bytes_per_element=bytes_per_element),
            pp(h, seq, mbs, pp_layers, hw, bytes_per_element=bytes_per_element)]


def table(results: list[Overlap]):
    """A DataFrame for a person: one row per strategy, bytes in MB, times in ms, the ratio and whether it
    can hide (numbers as text, three significant digits)."""
    import pandas as pd

    from perflab.core.readout import num

    return pd.DataFrame([{"strategy": o.strategy, "communication": o.comm, "MB per rank": num(o.comm_bytes / 1e6),
                          "t_comm (ms)": num(o.t_comm_s * 1e3), "computation": o.compute,
                          "t_compute (ms)": num(o.t_compute_s * 1e3), "t_comm / t_compute": num(o.ratio),
                          "hidden?": "yes" if o.hidden else "no", "closed form": o.closed_form}
                         for o in results]).set_index("strategy")


@dataclass(frozen=True)
class LinkComparison:
    """The four ratios of one shape on one accelerator over several links (lesson 06, section 7)."""

    shape: dict
    hardware: tuple[Hardware, ...]
    link_names: tuple[str, ...]
    results: tuple[tuple[Overlap, ...], ...]  # per link, the four strategies

    def table(self):
        """Rows: strategies; a ratio column per link, then the closed form."""
        import pandas as pd

        from perflab.core.readout import num

        cols = {f"{name} {hw.link_gbps:g} GB/s": [num(o.ratio) for o in res]
                for name, hw, res in zip(self.link_names, self.hardware, self.results, strict=True)}
        return pd.DataFrame({**cols, "closed form": [o.closed_form for o in self.results[0]]},
                            index=pd.Index([o.strategy for o in self.results[0]], name="strategy"))

    def figure(self, which: int = -1, title: str = ""):
        """The bars of one link's four ratios (the last link by default)."""
        hw = self.hardware[which]
        return plot(list(self.results[which]), title=title or f"{self.link_names[which]}, {hw.link_gbps:g} GB/s per direction")

    def thresholds(self, degree: int = 8) -> str:
        """Where DP's and TP's communication starts to hide, over the first and the last link."""
        first, last = self.hardware[0], self.hardware[-1]
        return (f"DP hides its all-reduce once each rank processes ≥ {min_tokens_dp(degree, last):,.0f} tokens per step "
                f"over {self.link_names[-1]} (≥ {min_tokens_dp(degree, first):,.0f} over {self.link_names[0]}); TP hides "
                f"its all-gather only for h ≥ {min_hidden_tp(degree, first):,.0f} even on {self.link_names[0]}.")


def compare_links(shape: dict, accelerator: str = "h100-sxm",
                  link_ids: tuple[str, ...] = ("nvlink4-h100", "ib-ndr-400"),
                  names: tuple[str, ...] = ("NVLink", "IB NDR")) -> LinkComparison:
    """`all_four(**shape)` on `accelerator` over each link of `link_ids` (shown under `names`)."""
    hws = tuple(hardware(accelerator, lk) for lk in link_ids)
    return LinkComparison(dict(shape), hws, tuple(names), tuple(tuple(all_four(**shape, hw=hw)) for hw in hws))


@dataclass(frozen=True)
class HereAndThere:
    """The same ratios with this machine's peak and its measured busbw, beside an H100's FLOPs per byte."""

    here: Hardware | None
    reason: str  # why nothing was computed (empty when `here` is set)
    results: tuple[Overlap, ...] = ()
    references: tuple[tuple[str, float], ...] = ()  # (label, FLOPs per byte)
    peak_source: str = ""  # where this device's peak comes from

    def text(self) -> str:
        from perflab.core.readout import num

        if self.here is None:
            return self.reason
        refs = ", ".join(f"{label}: {fpb:,.0f}" for label, fpb in self.references)
        return (f"this machine: {num(self.here.peak_tflops)} TFLOP/s ({self.peak_source}) over {num(self.here.link_gbps)} GB/s = "
                f"{self.here.flops_per_byte:,.0f} FLOPs per byte; {refs}")

    def table(self):
        """The four ratios here, and whether each hides (an empty table when nothing was computed)."""
        t = table(list(self.results)) if self.results else None
        return t[["t_comm / t_compute", "hidden?"]] if t is not None else None


SMALL_SHAPE = dict(h=1024, layers=12, seq=1024, mbs=4)  # the small model of lesson 06's "on this machine", fp32


def on_this_machine(peak_tflops: float | None, peak_source: str, busbw_gbps: float | None, name: str, ranks: int,
                    references: dict[str, Hardware] | None = None) -> HereAndThere:
    """The four ratios of SMALL_SHAPE in fp32 with `ranks`-way DP and TP, using this device's peak and the
    best busbw measured here; `references` (label → Hardware) are printed beside for their FLOPs per byte."""
    if not peak_tflops or not busbw_gbps:
        return HereAndThere(None, "peak FLOP/s unknown for this device, or no bandwidth measured: nothing to compute")
    here = Hardware(float(peak_tflops), float(busbw_gbps), f"{name} (measured busbw)")
    res = all_four(**SMALL_SHAPE, dp_degree=ranks, tp_degree=ranks, pp_layers=2, hw=here, bytes_per_element=4)
    refs = tuple((label, hw.flops_per_byte) for label, hw in (references or {}).items())
    return HereAndThere(here, "", tuple(res), refs, peak_source)


# ----------------------------------------------------------------------------- thresholds
def min_tokens_dp(dp_degree: int, hw: Hardware, *, bytes_per_element: int = 2) -> float:
    """Fewest tokens per rank and step (s·b) for DP's gradient all-reduce to hide (ratio = 1)."""
    return (dp_degree - 1) / dp_degree * hw.flops_per_byte / 2 * _bpe(bytes_per_element)


def min_hidden_tp(tp_degree: int, hw: Hardware, *, bytes_per_element: int = 2) -> float:
    """Smallest hidden size h for TP's all-gather to hide behind the next linear layer (ratio = 1)."""
    return (tp_degree - 1) / 2 * hw.flops_per_byte * _bpe(bytes_per_element)


# ----------------------------------------------------------------------------- the widget's function
def plot(results: list[Overlap], *, title: str = "", ax=None):
    """Paired bars per strategy: t_comm against t_compute (ms, log scale), the ratio written beside."""
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 4.2))
    else:
        fig = ax.figure
    ys = list(range(len(results)))
    comm = [o.t_comm_s * 1e3 for o in results]
    comp = [o.t_compute_s * 1e3 for o in results]
    ax.barh([y + 0.2 for y in ys], comp, height=0.38, color="tab:blue", label="t_compute")
    ax.barh([y - 0.2 for y in ys], comm, height=0.38,
            color=["tab:green" if o.hidden else "tab:red" for o in results], label="t_comm (green: hidden, red: exposed)")
    ax.set_yticks(ys, [o.strategy for o in results])
    ax.invert_yaxis()
    ax.set_xscale("log")
    hi = max(comm + comp)
    for y, o in zip(ys, results, strict=True):
        ax.text(hi * 1.6, y, f"ratio {o.ratio:.3g}", va="center", fontsize=9)
    ax.set_xlim(min(comm + comp) / 3, hi * 12)
    ax.set_xlabel("time per overlap window (ms, log scale)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    fig.tight_layout()
    return fig


def explore(h: int = 8192, layers: int = 80, seq: int = 4096, mbs: int = 1, dp_degree: int = 8, tp_degree: int = 8,
            pp_layers: int = 4, accelerator: str = "h100-sxm", link_id: str = "nvlink4-h100",
            bytes_per_element: int = 2):
    """What the overlap widget draws: (figure, table) for one configuration."""
    hw = hardware(accelerator, link_id)
    res = all_four(h, layers, seq, mbs, dp_degree, tp_degree, pp_layers, hw, bytes_per_element=bytes_per_element)
    fig = plot(res, title=f"h={h}, L={layers}, s={seq}, b={mbs}, DP={dp_degree}, TP={tp_degree}, "
                          f"next stage {pp_layers} layers\n{hw.label}, {bytes_per_element} B/element")
    return fig, table(res)
