"""Model and hardware FLOPs utilization (MFU, HFU): the one division, the peaks, and published runs.

    MFU = tokens/s × model FLOPs per token    / (devices × peak FLOP/s)
    HFU = tokens/s × hardware FLOPs per token / (devices × peak FLOP/s)

Model FLOPs are what the model mathematically needs for a forward and a backward pass; hardware
FLOPs add whatever the implementation computes again (activation checkpointing, a fused attention
kernel's recomputed scores). Definitions: Chowdhery et al. 2022 (PaLM) §4.1 and Korthikanti et al.
2022 §6.3. Which FLOPs per token to use is `perflab.flops.transformer`' business; this module does
the division.

`utilization` is the one place perflab divides FLOPs by a peak or a ceiling: a step's MFU and HFU
(lesson 02, the audit, the ladder, a trace), a run's from its throughput (`run_utilization`, `mfu`),
a planned cluster's (`perflab.plan.run`) and a kernel's fraction of a peak (`perflab.attention`) all
come through it, against one `Basis` per dtype. What the basis is (the spec peak, or the ceiling
measured here) is `perflab.flops.basis`' business; its names are re-exported here (`mfu_basis`,
`measured_basis`, `bases_for`, `Basis`, `matmul_ceiling`). Spec peaks come from
`perflab.core.hardware.spec_peak`.

Published runs (`data/published_runs.json`) are recomputed here from their printed inputs, and a
checklist says whether two MFU figures are comparable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, package_json, to_json
from perflab.core.validate import positive_number
from perflab.flops.basis import (
    CEILING_ATTEMPTS,
    CEILING_SHAPE_CPU,
    CEILING_SHAPE_GPU,
    Basis,
    Ceiling,
    bases_for,
    ceiling_shape,
    matmul_ceiling,
    measured_basis,
    mfu_basis,
    spec_basis,
)

__all__ = [
    "CEILING_ATTEMPTS", "CEILING_SHAPE_CPU", "CEILING_SHAPE_GPU", "CHECKLIST", "Basis", "Ceiling", "HandbookEstimate",
    "Reproduction", "RunUtilization", "Utilization", "achieved_tflops", "bases_for", "ceiling_shape", "checklist_table",
    "comparability", "describe_report", "handbook_estimate_example", "hfu", "implied_recompute_fraction",
    "implied_recompute_text", "matmul_ceiling", "measured_basis", "mfu", "mfu_basis", "narayanan_table1",
    "narayanan_table1_mfu", "narayanan_table1_table", "percent_text", "printed", "published_frame", "published_runs",
    "published_table", "reproduce", "resolve_peak", "run_description", "run_utilization", "shown_utilization",
    "spec_basis", "utilization",
]


def achieved_tflops(tokens_per_s: float, flops_per_token: float, devices: int = 1) -> float:
    """TFLOP/s per device: tokens/s × FLOPs per token / devices / 1e12."""
    return positive_number("tokens_per_s", tokens_per_s) * positive_number("flops_per_token", flops_per_token) / _devices(devices) / 1e12


def mfu(tokens_per_s: float, flops_per_token: float, peak_tflops: float, devices: int = 1) -> float:
    """Utilization as a fraction (0.462 = 46.2%): achieved FLOP/s over devices × peak (`run_utilization`,
    through `utilization`). A figure above 100 % is an error that says why: the peak given is too low.

    Pass model FLOPs per token for MFU, hardware FLOPs per token for HFU.
    """
    u = run_utilization(tokens_per_s, flops_per_token, devices=devices, peak_tflops=peak_tflops)
    if u.mfu is None:
        raise InputError(f"no utilization above 100 %: {u.suspect}")
    return u.mfu


hfu = mfu  # the same division; the difference is which FLOPs per token you pass


def _devices(devices) -> int:
    from perflab.core.validate import positive_int

    return positive_int("devices", devices)


def resolve_peak(peak_tflops: float | None = None, accelerator: str | None = None, dtype: str = "bf16") -> tuple[float, str]:
    """(peak TFLOP/s per device, where it came from) from a number or an accelerator name/id
    (`perflab.core.hardware.spec_peak`).

    An accelerator perflab does not know, or a dtype it has no dense mode for, is an error that
    says so: never another chip's peak.
    """
    if peak_tflops is not None:
        return positive_number("peak_tflops", peak_tflops), "given"
    if not accelerator:
        raise InputError("give a peak (--peak TFLOP/s) or an accelerator name (--accelerator h100-sxm)")
    from perflab.core.hardware import accelerators, spec_peak

    p = spec_peak(accelerator, dtype)
    if p.spec is None:
        known = ", ".join(a.id for a in accelerators())
        raise InputError(f"unknown accelerator {accelerator!r}: give --peak in TFLOP/s, or one of {known}")
    if p.tflops is None:
        raise InputError(f"{p.spec.name} has no dense {dtype} mode in perflab's table: choose another --dtype or give --peak")
    return float(p.tflops), p.source


@dataclass
class RunUtilization:
    """A run's MFU (and HFU) from its throughput, per device (`run_utilization`)."""

    tokens_per_s: float
    flops_per_token: float  # model FLOPs
    devices: int
    peak_tflops: float
    peak_source: str
    achieved_tflops: float  # model TFLOP/s per device
    mfu: float | None  # None above 100 %: `suspect` says why
    hardware_flops_per_token: float | None = None
    achieved_hardware_tflops: float | None = None
    hfu: float | None = None
    suspect: str | None = None

    def as_dict(self) -> JSON:
        """Every field, for `perflab mfu --json`."""
        return to_json(self)


def run_utilization(tokens_per_s: float, flops_per_token: float, *, devices: int = 1, peak_tflops: float | None = None,
                    accelerator: str | None = None, dtype: str = "bf16",
                    hardware_flops_per_token: float | None = None) -> RunUtilization:
    """MFU (and HFU when hardware FLOPs per token are given) of a run from its tokens/s: one second of
    one device's share of the run through `utilization`, against the peak given or looked up."""
    peak, source = resolve_peak(peak_tflops, accelerator, dtype)
    n = _devices(devices)
    ach = achieved_tflops(tokens_per_s, flops_per_token, n)
    hw = achieved_tflops(tokens_per_s, hardware_flops_per_token, n) if hardware_flops_per_token is not None else None
    basis = spec_basis(peak, dtype, source, "given peak" if source == "given" else "spec peak")
    u = utilization(1.0, {dtype: ach * 1e12}, {dtype: basis}, {dtype: (hw if hw is not None else ach) * 1e12})
    return RunUtilization(float(tokens_per_s), float(flops_per_token), n, peak, source, ach, u.mfu,
                          None if hw is None else float(hardware_flops_per_token or 0), hw,
                          u.hfu if hw is not None else None, u.suspect)


def implied_recompute_fraction(mfu_value: float, hfu_value: float) -> float:
    """Share of one forward pass that must have been recomputed for a run with this MFU to have this
    HFU, assuming model FLOPs = 3 forwards (forward + a backward of twice the forward):
    hardware/model = 1 + f/3, so f = 3·(HFU/MFU − 1)."""
    return 3 * (positive_number("hfu", hfu_value) / positive_number("mfu", mfu_value) - 1)


# ---------------------------------------------------------------- published runs, recomputed


@lru_cache(maxsize=1)
def _published_raw() -> JSON:
    return package_json("perflab.flops", "published_runs.json")


def published_runs() -> list[dict[str, Any]]:
    """The runs in perflab/flops/data/published_runs.json (inputs, published figures, sources)."""
    return [dict(r) for r in _published_raw()["runs"]]


def narayanan_table1() -> list[dict[str, Any]]:
    return [dict(r) for r in _published_raw()["narayanan_table1"]["rows"]]


def narayanan_table1_mfu():
    """Narayanan et al. 2021's Table 1 with each row's MFU under Korthikanti's eq. 7.

    The table's achieved TFLOP/s count a full recomputation (eq. 3), so they are hardware FLOPs;
    scaling by eq. 7 / eq. 3 (at the table's s and V) turns them into model FLOPs. The peak is the
    A100's dense bf16 figure from perflab's spec table. Returns a DataFrame.
    """
    import pandas as pd

    from perflab.flops import transformer as tf

    meta = _published_raw()["narayanan_table1"]
    peak = _spec_peak(meta["accelerator"], meta["dtype"])
    df = pd.DataFrame(narayanan_table1())
    s, v = meta["seq"], meta["vocab"]
    df["eq7/eq3"] = [tf.korthikanti_eq7(1, s, int(layers), int(hidden), v) / tf.narayanan_eq3(1, s, int(layers), int(hidden), v)
                     for layers, hidden in zip(df["layers"], df["hidden"], strict=True)]
    df["HFU (published %)"] = 100 * df["peak_fraction"]
    dt, basis = meta["dtype"], spec_basis(peak, meta["dtype"], meta["accelerator"])
    df["MFU (eq. 7, %)"] = [100 * (utilization(1.0, {dt: t * 1e12 * r}, {dt: basis}).mfu or math.nan)
                            for t, r in zip(df["tflops_per_gpu"], df["eq7/eq3"], strict=True)]
    df.attrs["peak_tflops"] = peak
    return df


def _spec_peak(accelerator: str, dtype: str) -> float:
    """The spec table's dense peak for a published run's accelerator (`perflab.core.hardware.spec_peak`);
    the data file names only known ones."""
    from perflab.core.hardware import by_id, spec_peak

    peak = spec_peak(by_id(accelerator), dtype).tflops
    if peak is None:
        raise ValueError(f"published_runs.json: no {dtype} peak for {accelerator} in the spec table")
    return peak


@dataclass(frozen=True)
class HandbookEstimate:
    """The handbook's quick TFLOP/s estimate of one run, with its HFU and MFU against a spec peak."""

    inputs: dict[str, float]  # model_b, seq, gbs, sec_per_iter, gpus as the handbook gives them
    hfu_tflops: float  # per GPU, recompute counted (the handbook's factor 4)
    mfu_tflops: float  # per GPU, without it (factor 3)
    peak_tflops: float
    hfu: float
    mfu: float
    source: str


def handbook_estimate_example() -> HandbookEstimate:
    """The handbook's quick TFLOP/s estimate on its own BLOOM-style inputs, with HFU and MFU against
    the A100's spec peak (through `utilization`)."""
    from perflab.flops import transformer as tf

    ex = _published_raw()["handbook_estimate"]
    i = ex["inputs"]
    peak = _spec_peak(ex["accelerator"], ex["dtype"])
    hw = tf.handbook_tflops_estimate(i["model_b"], i["seq"], i["gbs"], i["sec_per_iter"], i["gpus"], recompute=True)
    model = tf.handbook_tflops_estimate(i["model_b"], i["seq"], i["gbs"], i["sec_per_iter"], i["gpus"], recompute=False)
    dt = ex["dtype"]
    u = utilization(1.0, {dt: model * 1e12}, {dt: spec_basis(peak, dt, ex["accelerator"])}, {dt: hw * 1e12})
    return HandbookEstimate(dict(i), hw, model, peak, float(u.hfu or 0.0), float(u.mfu or 0.0), ex["source"])


def printed(value: float, decimals: int, rounding: str) -> float:
    """`value` as a paper prints it with `decimals` decimals: rounded, or truncated."""
    scale = 10 ** decimals
    if rounding == "truncate":
        return math.floor(value * scale + 1e-9) / scale
    return round(value * scale) / scale


@dataclass
class Reproduction:
    run_id: str
    name: str
    quantity: str
    published: float
    computed: float  # from the printed inputs
    low: float  # the range the inputs' own printing allows
    high: float
    reproduced: bool
    source: str
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)


def _compute(run: dict[str, Any], quantity: str, overrides: dict[str, float] | None = None) -> float:
    from perflab.flops import transformer as tf

    x = dict(run["inputs"], **(overrides or {}))
    conv = run["convention"]
    if conv == "palm":
        attn = quantity != "mfu_no_attention"
        per_token = 6 * x["n_params"] + (12 * x["layers"] * x["heads"] * x["head_dim"] * x["seq"] if attn else 0)
        return mfu(x["tokens_per_s"], per_token, x["peak_tflops"], x["devices"])
    if conv == "korthikanti":
        args = (x["batch"], x["seq"], x["layers"], x["hidden"], x["vocab"])
        flops = tf.korthikanti_eq7(*args) if quantity == "mfu" else tf.korthikanti_eq8(*args)
        u = utilization(x["iteration_s"], {"bf16": flops / x["devices"]},
                        {"bf16": spec_basis(x["peak_tflops"], "bf16", "given", "given peak")})
        return float(u.mfu if u.mfu is not None else math.nan)
    if conv == "narayanan_eq4":
        return tf.narayanan_training_days(x["tokens"], x["params"], x["gpus"], x["tflops_per_gpu"])
    raise ValueError(f"unknown convention {conv!r}")


def reproduce(run: dict[str, Any]) -> list[Reproduction]:
    """Recompute every published figure of `run` that its inputs determine."""
    out = []
    for q, pub in run["published"].items():
        if run["convention"] == "palm" and q == "hfu":
            continue  # not determined by the inputs (see the run's notes)
        value = _compute(run, q)
        lo = hi = value
        for name, half in run.get("printed_precision", {}).items():
            v = run["inputs"][name]
            a, b = _compute(run, q, {name: v - half}), _compute(run, q, {name: v + half})
            lo, hi = min(lo, a, b), max(hi, a, b)
        d, how = run["decimals"], run["rounding"]
        ok = printed(value, d, how) == pub or (printed(lo, d, how) <= pub <= printed(hi, d, how))
        out.append(Reproduction(run["id"], run["name"], q, pub, value, lo, hi, ok, run["source"], run.get("notes", "")))
    return out


def published_frame():
    """Every reproducible published figure: published, recomputed by perflab, and whether it matches."""
    import pandas as pd

    rows = []
    for run in published_runs():
        for r in reproduce(run):
            pct = r.quantity != "days"
            rows.append({"run": r.name, "quantity": r.quantity, "published": r.published, "perflab": r.computed,
                         "difference": r.computed - r.published, "reproduced": r.reproduced,
                         "unit": "fraction" if pct else "days", "source": r.source.split(":")[0]})
        if run["convention"] == "palm" and "hfu" in run["published"]:
            f = implied_recompute_fraction(run["published"]["mfu"], run["published"]["hfu"])
            rows.append({"run": run["name"], "quantity": "hfu (implied recompute share of a forward)",
                         "published": run["published"]["hfu"], "perflab": f, "difference": float("nan"),
                         "reproduced": None, "unit": "share of forward", "source": run["source"].split(":")[0]})
    return pd.DataFrame(rows)


def published_table():
    """`published_frame` as a person reads it: utilizations in percent (days as days), perflab's figure to one
    more digit than the paper printed, and whether the paper's figure is reproduced."""
    import pandas as pd

    from perflab.core.readout import plain

    def show(v, unit, digits):
        if unit == "days":
            return f"{plain(v, digits)} days"
        return f"{plain(100 * v, digits)} %"

    rows = []
    for r in published_frame().to_dict("records"):
        implied = r["unit"] == "share of forward"  # PaLM's HFU: perflab gives the recompute it implies
        rows.append({"run": r["run"], "quantity": r["quantity"],
                     "published": show(r["published"], "fraction" if implied else r["unit"], 3),
                     "perflab, from the paper's inputs": f"{r['perflab']:.0%} of a forward" if implied else
                     show(r["perflab"], r["unit"], 4),
                     "reproduced": {True: "yes", False: "no", None: "–"}.get(r["reproduced"], "–")})
    return pd.DataFrame(rows)


def implied_recompute_text(run_id: str = "palm-540b") -> str:
    """What a published HFU beside its MFU implies about the recomputation (`implied_recompute_fraction`), and
    the HFU full rematerialization would have given."""
    run = next(r for r in published_runs() if r["id"] == run_id)
    pub = run["published"]
    f = implied_recompute_fraction(pub["mfu"], pub["hfu"])
    return (f"implied recompute: {f:.0%} of a forward pass; full rematerialization would give HFU "
            f"{pub['mfu'] * (1 + 1 / 3):.1%}")


def narayanan_table1_table():
    """Narayanan et al.'s Table 1 (`narayanan_table1_mfu`): size, layers, hidden size, GPUs, batch, the achieved
    TFLOP/s per GPU they print, that figure as the HFU they publish, and the MFU by Korthikanti's eq. 7."""
    import pandas as pd

    from perflab.core.readout import plain

    df = narayanan_table1_mfu()
    return pd.DataFrame([{"parameters (B)": plain(r["params_b"], 4), "layers": int(r["layers"]),
                          "hidden": int(r["hidden"]), "GPUs": int(r["gpus"]), "batch": int(r["batch"]),
                          "TFLOP/s per GPU": plain(r["tflops_per_gpu"], 4), "HFU (published %)": plain(r["HFU (published %)"], 3),
                          "MFU (eq. 7, %)": plain(r["MFU (eq. 7, %)"], 3)} for r in df.to_dict("records")])


# ---------------------------------------------------------------- are two MFU numbers comparable?

CHECKLIST = (
    ("flops", "How were the FLOPs counted?", "formula (6N, 6N + 12LHQT, Megatron eq. 3/7/8, a counter); attention in or out; embedding/logits in or out"),
    ("recompute", "Model or hardware FLOPs?", "recomputation counted (HFU) or not (MFU); full vs selective checkpointing"),
    ("time", "What does the time include?", "steady-state step vs whole-run average; data loading, logging, evaluation, checkpoint saves"),
    ("peak", "Which peak?", "which chip and dtype; dense or 2:4-sparse datasheet figure; spec sheet vs measured ceiling"),
    ("precision", "Which precision?", "bf16/fp8 matmuls with fp32 parts counted at the fast rate"),
    ("scale", "Same scale and cluster?", "number of devices, data parallelism (gradient all-reduce), network, storage"),
)


def checklist_table():
    """The questions to ask before comparing two MFU figures (`CHECKLIST`), and what to look at for each."""
    import pandas as pd

    return pd.DataFrame([{"question": q, "look at": what} for _k, q, what in CHECKLIST]).set_index("question")


def comparability(run_a: Mapping[str, Any], run_b: Mapping[str, Any]):
    """A checklist DataFrame: for each question, what each run says and whether they match.

    Runs are dicts with any of the keys 'flops', 'recompute', 'time', 'peak', 'precision',
    'scale' (strings); a missing key is 'unknown', and unknown never counts as comparable.
    """
    import pandas as pd

    rows = []
    for key, question, what in CHECKLIST:
        a, b = run_a.get(key), run_b.get(key)
        verdict = "unknown" if a is None or b is None else ("same" if str(a).strip().lower() == str(b).strip().lower() else "differs")
        rows.append({"question": question, "look at": what, run_a.get("name", "run A"): a or "unknown",
                     run_b.get("name", "run B"): b or "unknown", "verdict": verdict})
    return pd.DataFrame(rows).set_index("question")


def run_description(run_id: str) -> dict[str, str]:
    """The checklist answers perflab/flops/data/published_runs.json holds for a published run."""
    for r in published_runs():
        if r["id"] == run_id:
            if "describe" not in r:
                raise InputError(f"no checklist description for {run_id!r}")
            return dict(r["describe"])
    raise InputError(f"unknown run {run_id!r}: use one of {', '.join(r['id'] for r in published_runs())}")


def describe_report(report, name: str = "this step") -> dict[str, str]:
    """Checklist answers for a step measured with `perflab.flops.step.measure_step`."""
    ceiling = ("; ceiling measured on a busy machine (no MFU against it)" if getattr(report, "ceiling_verdict", None)
               else f"; ceiling {report.ceiling_tflops:.3g} TFLOP/s measured" if report.ceiling_tflops else "")
    peak = (f"{report.peak_tflops:.3g} TFLOP/s {report.dtype} ({report.peak_source})" if report.peak_tflops
            else "peak unknown") + ceiling
    return {
        "name": name,
        "flops": "exact per-component count (perflab), matmul-class, dense attention, logits",
        "recompute": "MFU: no recompute counted; HFU includes it",
        "time": f"median wall-clock step ({report.steps} steps) incl. optimizer, excl. data loading",
        "peak": peak,
        "precision": f"{report.dtype} matmuls",
        "scale": f"1 device ({report.device_name})",
    }


@dataclass(frozen=True)
class Utilization:
    """MFU and HFU of a step against one basis per dtype.

        time at basis = Σ_dtype FLOPs_dtype / basis_dtype     (seconds the step would take at the bases)
        MFU           = time at basis (model FLOPs) / step time
        HFU           = time at basis (hardware FLOPs: recompute included) / step time

    so a bf16 step whose logits stay fp32 is not measured against one rate for both. `mfu`/`hfu` are
    None when unknown, and also when they would exceed 100 %: a step cannot run faster than its
    ceiling, so then the ceiling is suspect (`suspect` says why) and no utilization is printed."""

    step_s: float
    mfu: float | None
    hfu: float | None
    model_tflops: float  # achieved, model FLOPs
    hardware_tflops: float
    effective_tflops: float | None  # Σ hardware FLOPs / time at basis: the FLOPs-weighted basis
    bases: dict[str, Basis]
    suspect: str | None = None

    @property
    def spec(self) -> bool:
        """Every dtype against a spec-sheet peak."""
        return bool(self.bases) and all(b.kind == "spec peak" for b in self.bases.values())

    def basis_label(self) -> str:
        if not self.bases:
            return "no matmul-class FLOPs counted: MFU undefined"
        s = "; ".join(b.label() for b in self.bases.values()) + (f"; {self.suspect}" if self.suspect else "")
        if any(b.kind == "measured ceiling" for b in self.bases.values()):
            s = "peak unknown (no spec-sheet figure for this device and dtype): MFU against the " + s
        return s

    def text(self, which: str = "mfu") -> str:
        """'34.7 %', or why there is no figure (no basis, or a suspect ceiling)."""
        v = getattr(self, which)
        if v is not None:
            return shown_utilization(v)
        return f"not shown: {self.suspect}" if self.suspect else "unknown (no basis)"

    def as_dict(self) -> JSON:
        """The figures, each basis and the basis in words, for a command's or a ladder's JSON."""
        return {"step_s": self.step_s, "mfu": self.mfu, "hfu": self.hfu, "model_tflops": self.model_tflops,
                "hardware_tflops": self.hardware_tflops, "effective_tflops": self.effective_tflops,
                "bases": {d: b.as_dict() for d, b in self.bases.items()}, "suspect": self.suspect,
                "basis": self.basis_label()}


def utilization(step_s: float, flops_by_dtype: Mapping[str, float], bases: Mapping[str, Basis],
                hardware_by_dtype: Mapping[str, float] | None = None) -> Utilization:
    """MFU (model FLOPs per dtype) and HFU (hardware FLOPs per dtype; default the model FLOPs) of a
    step of `step_s` seconds, against `bases` (one per dtype, `bases_for`). The one place perflab
    divides a step's FLOPs by a peak or ceiling."""
    hw = dict(hardware_by_dtype if hardware_by_dtype is not None else flops_by_dtype)
    step_s = positive_number("step_s", step_s)
    model_t = sum(flops_by_dtype.values()) / step_s / 1e12
    hw_t = sum(hw.values()) / step_s / 1e12
    dtypes = [d for d in dict.fromkeys([*flops_by_dtype, *hw]) if hw.get(d, 0) > 0 or flops_by_dtype.get(d, 0) > 0]
    used = {d: bases[d] for d in dtypes if d in bases}
    if not dtypes or any(d not in bases or not bases[d].tflops for d in dtypes):
        return Utilization(step_s, None, None, model_t, hw_t, None, used)
    rate = {d: float(bases[d].tflops or 0) * 1e12 for d in dtypes}
    t_model = sum(flops_by_dtype.get(d, 0) / rate[d] for d in dtypes)
    t_hw = sum(hw.get(d, 0) / rate[d] for d in dtypes)
    mfu_v, hfu_v = t_model / step_s, t_hw / step_s
    eff = sum(hw.values()) / t_hw / 1e12 if t_hw > 0 else None
    suspect = None
    if max(mfu_v, hfu_v) > 1.0:
        suspect = (f"the step ran at {hw_t * 1e3:.4g} GFLOP/s of hardware FLOPs, faster than its basis allows "
                   f"({percent_text(hfu_v)} of it): the ceiling is suspect (too low for this step, or measured on a "
                   "busy machine); measure it again when the machine is quiet")
        mfu_v = hfu_v = None  # type: ignore[assignment]
    return Utilization(step_s, mfu_v, hfu_v, model_t, hw_t, eff, used, suspect)


def percent_text(fraction: float) -> str:
    from perflab.core.readout import percent

    return percent(fraction)


def shown_utilization(fraction: float | None, basis: Basis | str | None = None) -> str:
    """An MFU or HFU as a person reads it: '34.7 %'; 'unknown' without a basis; and above 100 % never
    as a figure: a step cannot run faster than its ceiling, so that ceiling is suspect."""
    from perflab.core.readout import percent

    if fraction is None or not math.isfinite(fraction):
        return "unknown (no basis)"
    if fraction <= 1.0:
        return percent(fraction)
    what = basis.label() if isinstance(basis, Basis) else (basis or "basis")
    return (f"not shown: the step ran faster than its basis, the {what}, so that ceiling is suspect (too low for "
            "this step, or measured on a busy machine)")
