"""Model and hardware FLOPs utilization (MFU, HFU), the peaks they divide by, and published runs.

    MFU = tokens/s × model FLOPs per token    / (devices × peak FLOP/s)
    HFU = tokens/s × hardware FLOPs per token / (devices × peak FLOP/s)

Model FLOPs are what the model mathematically needs for a forward and a backward pass; hardware
FLOPs add whatever the implementation computes again (activation checkpointing, a fused attention
kernel's recomputed scores). Definitions: Chowdhery et al. 2022 (PaLM) §4.1 and Korthikanti et al.
2022 §6.3. Which FLOPs per token to use is `perflab.flops.transformer`' business; this module does
the division, finds the peak, and measures the device's own matmul ceiling.

Two denominators, always side by side in this course:
* the **spec peak** (datasheet, dense; a CPU gets an estimate from cores × clock × FLOPs/cycle),
* the **measured ceiling**: the fastest large square matmul this device actually runs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from perflab.core.dtypes import DType
from perflab.core.errors import InputError
from perflab.core.validate import positive_number


def achieved_tflops(tokens_per_s: float, flops_per_token: float, devices: int = 1) -> float:
    """TFLOP/s per device: tokens/s × FLOPs per token / devices / 1e12."""
    return positive_number("tokens_per_s", tokens_per_s) * positive_number("flops_per_token", flops_per_token) / _devices(devices) / 1e12


def mfu(tokens_per_s: float, flops_per_token: float, peak_tflops: float, devices: int = 1) -> float:
    """Utilization as a fraction (0.462 = 46.2%): achieved FLOP/s over devices × peak.

    Pass model FLOPs per token for MFU, hardware FLOPs per token for HFU.
    """
    return achieved_tflops(tokens_per_s, flops_per_token, devices) / positive_number("peak_tflops", peak_tflops)


hfu = mfu  # the same division; the difference is which FLOPs per token you pass


def _devices(devices) -> int:
    from perflab.core.validate import positive_int

    return positive_int("devices", devices)


def resolve_peak(peak_tflops: float | None = None, accelerator: str | None = None, dtype: str = "bf16") -> tuple[float, str]:
    """(peak TFLOP/s per device, where it came from) from a number or an accelerator name/id.

    An accelerator perflab does not know, or a dtype it has no dense mode for, is an error that
    says so: never another chip's peak.
    """
    if peak_tflops is not None:
        return positive_number("peak_tflops", peak_tflops), "given"
    if not accelerator:
        raise InputError("give a peak (--peak TFLOP/s) or an accelerator name (--accelerator h100-sxm)")
    from perflab.core.hardware import accelerators, lookup

    spec = lookup(accelerator)
    if spec is None:
        known = ", ".join(a.id for a in accelerators())
        raise InputError(f"unknown accelerator {accelerator!r}: give --peak in TFLOP/s, or one of {known}")
    p = spec.peak(dtype)
    if p is None:
        raise InputError(f"{spec.name} has no dense {dtype} mode in perflab's table: choose another --dtype or give --peak")
    return float(p), f"{spec.name} {dtype} dense ({spec.sources.get('peak_tflops', 'datasheet')})"


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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_utilization(tokens_per_s: float, flops_per_token: float, *, devices: int = 1, peak_tflops: float | None = None,
                    accelerator: str | None = None, dtype: str = "bf16",
                    hardware_flops_per_token: float | None = None) -> RunUtilization:
    """MFU (and HFU when hardware FLOPs per token are given) of a run from its tokens/s: one second of
    one device's share of the run through `utilization`, against the peak given or looked up."""
    peak, source = resolve_peak(peak_tflops, accelerator, dtype)
    n = _devices(devices)
    ach = achieved_tflops(tokens_per_s, flops_per_token, n)
    hw = achieved_tflops(tokens_per_s, hardware_flops_per_token, n) if hardware_flops_per_token is not None else None
    basis = Basis(peak, "given peak" if source == "given" else "spec peak", dtype, source)
    u = utilization(1.0, {dtype: ach * 1e12}, {dtype: basis}, {dtype: (hw if hw is not None else ach) * 1e12})
    return RunUtilization(float(tokens_per_s), float(flops_per_token), n, peak, source, ach, u.mfu,
                          None if hw is None else float(hardware_flops_per_token or 0), hw,
                          u.hfu if hw is not None else None, u.suspect)


def implied_recompute_fraction(mfu_value: float, hfu_value: float) -> float:
    """Share of one forward pass that must have been recomputed for a run with this MFU to have this
    HFU, assuming model FLOPs = 3 forwards (forward + a backward of twice the forward):
    hardware/model = 1 + f/3, so f = 3·(HFU/MFU − 1)."""
    return 3 * (positive_number("hfu", hfu_value) / positive_number("mfu", mfu_value) - 1)


# ---------------------------------------------------------------- the device's measured ceiling


@dataclass
class Ceiling:
    tflops: float
    label: str
    source: str  # 'mamf' or 'matmul'
    size: int | None = None


_CEILINGS: dict[tuple[str, str, int], Ceiling] = {}


def matmul_ceiling(device=None, dtype: DType | str = "fp32", size: int | None = None) -> Ceiling:
    """The device's measured matmul ceiling in TFLOP/s for `dtype`.

    Prefers the cached maximum-achievable-matmul search of `perflab.gemm.mamf` when that module exists
    and has a value for this device; otherwise times one large square matmul here (8192³ on a GPU,
    2048³ on a CPU unless `size` says otherwise) and remembers it for this process.
    """
    import torch

    from perflab.core.device import pick_device
    from perflab.core.dtypes import parse_dtype

    dev = torch.device(device) if device is not None else pick_device()
    dt = parse_dtype(dtype)  # a DType passes through as it is; a name from a notebook is parsed here
    try:
        from perflab.gemm import mamf

        v = mamf.measured_ceiling(dev, dt.name)
        if v:
            return Ceiling(float(v), "measured ceiling (maximum achievable matmul FLOPs search)", "mamf")
    except (ImportError, AttributeError):
        pass
    n = size or (8192 if dev.type == "cuda" else 2048)
    key = (str(dev), dt.name, n)
    if key not in _CEILINGS:
        from perflab.core.measure import measure_matmul

        r = measure_matmul(n, n, n, dt.name, dev, warmup_ms=50 if dev.type == "cuda" else 25,
                           rep_ms=300 if dev.type == "cuda" else (200 if n >= 1024 else 50))
        _CEILINGS[key] = Ceiling(r.tflops, f"measured matmul ceiling (largest square matmul measured here: {n}³ {dt})",
                                 "matmul", n)
    return _CEILINGS[key]


# ---------------------------------------------------------------- published runs, recomputed


@lru_cache(maxsize=1)
def _published_raw() -> dict[str, Any]:
    return json.loads(resources.files("perflab.flops").joinpath("data/published_runs.json").read_text())


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
    df["MFU (eq. 7, %)"] = 100 * df["tflops_per_gpu"] / peak * df["eq7/eq3"]
    df.attrs["peak_tflops"] = peak
    return df


def _spec_peak(accelerator: str, dtype: str) -> float:
    """The spec table's dense peak for a published run's accelerator; the data file names only known ones."""
    from perflab.core.hardware import by_id

    peak = by_id(accelerator).peak(dtype)
    if peak is None:
        raise ValueError(f"published_runs.json: no {dtype} peak for {accelerator} in the spec table")
    return peak


def handbook_estimate_example() -> dict[str, Any]:
    """The handbook's quick TFLOP/s estimate on its own BLOOM-style inputs, with HFU and MFU against
    the A100's spec peak: {inputs, hfu_tflops, mfu_tflops, peak_tflops, hfu, mfu, source}."""
    from perflab.flops import transformer as tf

    ex = _published_raw()["handbook_estimate"]
    i = ex["inputs"]
    peak = _spec_peak(ex["accelerator"], ex["dtype"])
    hw = tf.handbook_tflops_estimate(i["model_b"], i["seq"], i["gbs"], i["sec_per_iter"], i["gpus"], recompute=True)
    model = tf.handbook_tflops_estimate(i["model_b"], i["seq"], i["gbs"], i["sec_per_iter"], i["gpus"], recompute=False)
    return {"inputs": dict(i), "hfu_tflops": hw, "mfu_tflops": model, "peak_tflops": peak, "hfu": hw / peak,
            "mfu": model / peak, "source": ex["source"]}


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
        return flops / x["iteration_s"] / (x["devices"] * x["peak_tflops"] * 1e12)
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


# ---------------------------------------------------------------- are two MFU numbers comparable?

CHECKLIST = (
    ("flops", "How were the FLOPs counted?", "formula (6N, 6N + 12LHQT, Megatron eq. 3/7/8, a counter); attention in or out; embedding/logits in or out"),
    ("recompute", "Model or hardware FLOPs?", "recomputation counted (HFU) or not (MFU); full vs selective checkpointing"),
    ("time", "What does the time include?", "steady-state step vs whole-run average; data loading, logging, evaluation, checkpoint saves"),
    ("peak", "Which peak?", "which chip and dtype; dense or 2:4-sparse datasheet figure; spec sheet vs measured ceiling"),
    ("precision", "Which precision?", "bf16/fp8 matmuls with fp32 parts counted at the fast rate"),
    ("scale", "Same scale and cluster?", "number of devices, data parallelism (gradient all-reduce), network, storage"),
)


def comparability(run_a: dict[str, Any], run_b: dict[str, Any]):
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
    peak = (f"{report.peak_tflops:.3g} TFLOP/s {report.dtype} ({report.peak_source})" if report.peak_tflops
            else "peak unknown") + (f"; ceiling {report.ceiling_tflops:.3g} TFLOP/s measured" if report.ceiling_tflops else "")
    return {
        "name": name,
        "flops": "exact per-component count (perflab), matmul-class, dense attention, logits",
        "recompute": "MFU: no recompute counted; HFU includes it",
        "time": f"median wall-clock step ({report.steps} steps) incl. optimizer, excl. data loading",
        "peak": peak,
        "precision": f"{report.dtype} matmuls",
        "scale": f"1 device ({report.device_name})",
    }


# ---------------------------------------------------------------- one honest basis for MFU

MFU_CEILINGS = "mfu_ceilings"  # <results>/<host>/<device>/mfu_ceilings.json
CEILING_SHAPE_CPU = (1024, 4096, 128)  # the course's CPU model's largest GEMM (its logits: tokens × vocab × hidden)
CEILING_SHAPE_GPU = (8192, 8192, 8192)
CEILING_ATTEMPTS = 3  # measurements of a ceiling while the machine stays busy, before it is used unstored


def ceiling_shape(device) -> tuple[int, int, int]:
    """The one (m, n, k) a device's MFU ceiling is measured at, whoever asks (audit, ladder, lessons),
    so that every MFU on one machine divides by the same figure for the same dtype."""
    kind = getattr(device, "type", None) or str(device or "cpu").split(":")[0]
    return CEILING_SHAPE_GPU if kind == "cuda" else CEILING_SHAPE_CPU


@dataclass(frozen=True)
class Basis:
    """What an MFU is divided by, named: the spec peak of the dtype that ran, or a ceiling measured
    for that dtype (with its figure, shape, statistic, date, version and the machine's quietness)."""

    tflops: float | None
    kind: str  # 'spec peak', 'given peak', 'measured ceiling' or 'unknown'
    dtype: str
    what: str  # the spec sheet, or the matmul that was timed
    when: str | None = None  # date of the measurement
    shape: tuple[int, int, int] | None = None  # (m, n, k) of the timed matmul
    version: int | None = None  # 1 for the first ceiling stored for this dtype and shape, 2 after a re-measure
    questioned: str | None = None  # why the measured value was not stored (above the peak, a busy machine)
    replaced: str | None = None  # the earlier version's figure and date, when this is version 2+
    statistic: str | None = None  # 'fastest call' for a measured ceiling
    quietness: dict[str, Any] | None = None  # the machine's quietness while it was measured

    @property
    def stored(self) -> bool:
        return self.kind == "spec peak" or self.version is not None

    def label(self) -> str:
        """The basis in words, with its figure and date, for every output that shows an MFU."""
        if self.tflops is None:
            return f"no {self.dtype} peak or ceiling: MFU unknown"
        if self.kind == "estimated peak":
            return f"{self.dtype} estimated peak {self.tflops:.4g} TFLOP/s ({self.what})"
        if self.kind == "given peak":
            return f"{self.dtype} peak {self.tflops:.4g} TFLOP/s (given)"
        if self.kind == "spec peak":
            return f"{self.dtype} spec peak {self.tflops:.4g} TFLOP/s ({self.what})"
        m, n, k = self.shape or (0, 0, 0)
        s = (f"{self.dtype} ceiling {self.tflops * 1e3:.4g} GFLOP/s measured here ({m}×{n}×{k} matmul, "
             f"{self.statistic or 'fastest call'}; {self.when}")
        s += f"; version {self.version}" + (f", replacing {self.replaced}" if self.replaced else "") if self.version \
            else ""
        s += ")"
        if self.questioned:
            s += f"; not stored: {self.questioned}"
        return s

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label()}


def _ceilings_path(device_slug: str):
    from perflab.core.results import sweep_path

    return sweep_path(MFU_CEILINGS, device_slug).with_suffix(".json")


def stored_ceilings(device_slug: str) -> dict[str, list[dict[str, Any]]]:
    """Every version of every ceiling stored for this device (key: dtype, shape, torch)."""
    try:
        return json.loads(_ceilings_path(device_slug).read_text())
    except (OSError, ValueError):
        return {}


def ceiling_key(dtype: str, shape: tuple[int, int, int]) -> str:
    import torch

    return f"{dtype} {shape[0]}x{shape[1]}x{shape[2]} torch {torch.__version__}"


def _share(q: dict[str, Any] | None) -> float:
    v = (q or {}).get("share")
    return float(v) if isinstance(v, (int, float)) else math.inf


def _from_record(v: dict[str, Any], prev: dict[str, Any] | None, questioned: str | None = None) -> Basis:
    return Basis(float(v["tflops"]), "measured ceiling", v["dtype"], v["what"], v["date"], tuple(v["shape"]),
                 int(v["version"]), questioned,
                 f"version {prev['version']} ({prev['tflops'] * 1e3:.4g} GFLOP/s, {prev['date']})" if prev else None,
                 v.get("statistic", "fastest call"), v.get("quietness"))


def mfu_basis(device, dtype: str, shape: tuple[int, int, int] | None = None, *, remeasure: bool = False,
              watch=None) -> Basis:
    """The basis an MFU of a step that ran in `dtype` is computed against, on `device`: the one rule
    the audit, the ladder and the lessons share.

    1. The spec-sheet peak for `dtype`, where perflab's hardware table has one (a GPU it knows).
    2. Otherwise the ceiling stored for `dtype` on this device: the fastest call of a matmul at
       `shape` (default `ceiling_shape(device)`, the same for every caller), stored per device, dtype,
       shape and torch version in `<results>/<host>/<device>/mfu_ceilings.json` with its date,
       statistic and the machine's quietness. The first stored measurement is version 1 and stays
       the basis: a later lesson's run does not replace it.
    3. With none stored (or `remeasure=True`) it is measured now (again, up to `CEILING_ATTEMPTS` times,
       while the machine is busy). It is stored only when the machine was quiet (`perflab.core.quietness`), not above the peak (spec or CPU estimate,
       `perflab.core.hardware.ceiling_problem`), and never in place of a quieter stored one; otherwise
       it is used for this run only and its label says why it was not stored (a busy machine makes the
       ceiling, and so every MFU against it, suspect).

    `watch(device)` is the context manager whose `.result` is the measurement's quietness (default
    `perflab.core.quietness.watch`; tests inject one). An estimated CPU peak is never the basis:
    it assumes every core's vector units busy at the nominal clock, which no training step reaches."""
    import torch

    from perflab.core.device import describe
    from perflab.core.hardware import peaks_for

    dev = torch.device(device) if device is not None else None
    info = describe(dev)
    peaks = peaks_for(info)
    if peaks.source == "spec sheet" and peaks.get(dtype):
        spec = peaks.spec
        src = spec.sources.get("peak_tflops", spec.name) if spec is not None else info.name
        return Basis(float(peaks.get(dtype) or 0), "spec peak", dtype, f"{info.name}; {src}")
    return measured_basis(device, dtype, shape, remeasure=remeasure, watch=watch)


def measured_basis(device, dtype: str, shape: tuple[int, int, int] | None = None, *, remeasure: bool = False,
                   watch=None) -> Basis:
    """Rules 2 and 3 of `mfu_basis` on any device (a GPU with a spec sheet too): the measured ceiling
    for `dtype`, stored only when quiet, never above the peak, never in place of a quieter one.
    Lesson 02 shows it beside the spec peak."""
    import time

    import torch

    from perflab.core.device import describe
    from perflab.core.hardware import ceiling_problem, peaks_for
    from perflab.core.quietness import of_bench
    from perflab.core.quietness import watch as watching

    dev = torch.device(device) if device is not None else None
    info = describe(dev)
    peaks = peaks_for(info)
    shp: tuple[int, int, int] = (int(shape[0]), int(shape[1]), int(shape[2])) if shape is not None \
        else ceiling_shape(dev)
    doc = stored_ceilings(info.slug)
    key = ceiling_key(dtype, shp)
    versions = doc.get(key, [])
    if versions and not remeasure:
        return _from_record(versions[-1], versions[-2] if len(versions) > 1 else None)
    from perflab.core import measure as M

    m, n, k = shp
    for _ in range(CEILING_ATTEMPTS):  # a disturbed measurement is taken again, within this budget
        with (watch or watching)(dev if dev is not None else "cpu") as w:
            r = M.measure_matmul(m, n, k, "fp32" if dtype == "tf32" and (dev is None or dev.type != "cuda") else dtype,
                                 dev, warmup_ms=25 if dev is None or dev.type != "cuda" else 50,
                                 rep_ms=150 if dev is None or dev.type != "cuda" else 300, check=False, min_reps=3)
        qq = of_bench(getattr(r, "bench", None), w)
        q = qq.to_json()
        if not qq.disturbed:
            break
    # a ceiling is what the device can do: the fastest of the timed calls
    tflops = 2 * m * n * k / r.min_s / 1e12
    what = f"fastest of {r.n_reps} timed {m}×{n}×{k} {dtype} matmuls"
    date = time.strftime("%Y-%m-%d %H:%M")
    problem = ceiling_problem(tflops, dtype, peaks)
    if problem is None and not qq.quiet:
        problem = (f"measured while the machine was busy ({qq.cause}), so every MFU against it is suspect"
                   if qq.disturbed else "the machine's quietness could not be read")
    prev = versions[-1] if versions else None
    if problem is None and prev is not None and _share(prev.get("quietness")) < _share(q):
        problem = f"the stored version {prev['version']} was measured on a quieter machine"
    if problem:
        if prev is not None and remeasure:  # the stored ceiling stays the basis; the new figure is named
            return _from_record(prev, versions[-2] if len(versions) > 1 else None,
                                f"a re-measure gave {tflops * 1e3:.4g} GFLOP/s ({date}): {problem}")
        return Basis(tflops, "measured ceiling", dtype, what, date, shp, None, problem, None, "fastest call", q)
    rec = {"version": len(versions) + 1, "tflops": tflops, "date": date, "shape": list(shp), "dtype": dtype,
           "what": what, "statistic": "fastest call", "quietness": q, "torch": torch.__version__, "device": info.name}
    doc[key] = [*versions, rec]
    path = _ceilings_path(info.slug)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        tmp.replace(path)
    except OSError:
        pass  # a read-only results folder: the ceiling is used for this run only
    return _from_record(rec, prev)


def bases_for(device, dtypes: Iterable[str], shape: tuple[int, int, int] | None = None, *, remeasure: bool = False,
              watch=None) -> dict[str, Basis]:
    """One basis per dtype that ran (`mfu_basis`), the denominators of `utilization`."""
    return {d: mfu_basis(device, d, shape, remeasure=remeasure, watch=watch) for d in dict.fromkeys(dtypes)}


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

    def as_dict(self) -> dict[str, Any]:
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
