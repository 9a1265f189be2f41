"""Reference data: measurements recorded on a real GPU, shipped in data/ with their provenance,
and published figures (other people's measurements, datasheet examples) with their sources.

A reference file is `data/<kind>__<device slug>.json`:

    {"kind": "waves", "provenance": {"device": ..., "driver_version": ..., "cuda_version": ...,
     "torch_version": ..., "date": ...}, "params": {...}, "rows": [...], "summary": {...}}

`record_reference(kind, rows, device=..., params=...)` writes one (`perflab reference record` does
it on a GPU for every lesson that needs one); `load_references(kind)` reads them back, so a
notebook on a laptop can plot what an H100 did beside its own CPU measurement, labelled with
where and when it was measured. `published(key)` reads perflab/gemm/data/published_shapes.json.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON, package_json
from perflab.core.results import jsonable

KINDS = ("waves", "heads", "swiglu", "mamf")


def data_root() -> Path | None:
    """Where reference files live: $PERFLAB_DATA, else data/ in the course checkout, else None."""
    env = os.environ.get("PERFLAB_DATA")
    if env:
        return Path(env).expanduser()
    from perflab.core.results import course_checkout

    checkout = course_checkout()
    return checkout / "data" if checkout else None


def provenance(device=None) -> JSON:
    """What a measurement was taken on: device, driver, CUDA, torch, date (and the CPU for a CPU), as
    a reference file's `provenance` block."""
    import torch

    from perflab import __version__
    from perflab.core.device import describe

    info = describe(device)
    d = info.details
    out = {
        "device": info.name, "kind": info.kind, "slug": info.slug,
        "sm_count": d.get("sm_count"), "compute_capability": d.get("compute_capability"),
        "driver_version": d.get("driver_version"), "cuda_version": d.get("cuda_version") or torch.version.cuda,
        "torch_version": torch.__version__, "perflab_version": __version__, "python_version": platform.python_version(),
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
    }
    if info.kind == "cpu":
        out.update(torch_threads=d.get("torch_threads"), vector_isa=d.get("vector_isa"))
    return out


def _safe(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "unknown"


def reference_path(kind: str, slug: str, root: Path | str | None = None) -> Path:
    base = Path(root) if root is not None else data_root()
    if base is None:
        raise InputError("no data/ folder here (perflab is not run from the course checkout): pass a folder, or set PERFLAB_DATA")
    return base / f"{_safe(kind)}__{_safe(slug)}.json"


def record_reference(kind: str, rows, *, device=None, params: dict[str, Any] | None = None,
                     summary: dict[str, Any] | None = None, root: Path | str | None = None) -> Path:
    """Write one reference file (rows: a DataFrame or a list of dicts) with this device's provenance."""
    if kind not in KINDS:
        raise InputError(f"unknown reference kind {kind!r}: use one of {', '.join(KINDS)}")
    if hasattr(rows, "to_dict"):
        rows = rows.to_dict("records")
    prov = provenance(device)
    doc = {"kind": kind, "provenance": prov, "params": params or {}, "summary": summary or {}, "rows": list(rows)}
    path = reference_path(kind, prov["slug"], root)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=jsonable) + "\n")
    tmp.replace(path)
    return path


@dataclass
class Reference:
    kind: str
    provenance: dict[str, Any]
    params: dict[str, Any]
    rows: list[dict[str, Any]]
    summary: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows)

    @property
    def on_gpu(self) -> bool:
        return self.provenance.get("kind") == "cuda"

    @property
    def label(self) -> str:
        """e.g. 'measured by this course on NVIDIA H100 80GB HBM3 · driver 550.54 · CUDA 12.4 · torch 2.4.0 ·
        2025-01-10 (reference data)'."""
        p = self.provenance
        parts = [f"measured by this course on {p.get('device', '?')}"]
        if p.get("driver_version"):
            parts.append(f"driver {p['driver_version']}")
        if p.get("cuda_version"):
            parts.append(f"CUDA {p['cuda_version']}")
        parts.append(f"torch {p.get('torch_version', '?')}")
        parts.append(str(p.get("date", "?"))[:10])
        return " · ".join(parts) + " (reference data)"


def load_references(kind: str, root: Path | str | None = None, *, gpu_only: bool = True) -> list[Reference]:
    """Every reference file of `kind` (GPU ones only, unless gpu_only=False), newest first."""
    base = Path(root) if root is not None else data_root()
    if base is None or not base.is_dir():
        return []
    out = []
    for p in sorted(base.glob(f"{_safe(kind)}__*.json")):
        try:
            doc = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if doc.get("kind") != kind:
            continue
        ref = Reference(kind, doc.get("provenance", {}), doc.get("params", {}), doc.get("rows", []),
                        doc.get("summary", {}), p)
        if gpu_only and not ref.on_gpu:
            continue
        out.append(ref)
    return sorted(out, key=lambda r: str(r.provenance.get("date", "")), reverse=True)


def missing_note(kind: str, instead: str = "the model's prediction") -> str:
    """What a notebook says when no GPU reference of `kind` is shipped."""
    return (f"No GPU reference data for '{kind}' is shipped with this copy of the course yet: there is no real GPU "
            f"measurement to show here, so this section shows {instead}. On a GPU machine, "
            f"`perflab reference record --what {kind}` measures it and writes data/{kind}__<device>.json "
            "(with device, driver, CUDA and torch versions and the date).")


@lru_cache(maxsize=1)
def _published() -> JSON:
    return package_json("perflab.gemm", "published_shapes.json")


def published(key: str) -> dict[str, Any]:
    """A published record (with its 'source') from perflab/gemm/data/published_shapes.json."""
    data = _published()
    if key not in data or key.startswith("_"):
        raise KeyError(f"no published record {key!r}; known: {', '.join(k for k in data if not k.startswith('_'))}")
    return data[key]


def published_mamf(spec_id: str | None, dtype: str = "bf16") -> dict[str, Any] | None:
    """The published MAMF row for a hardware-table id and dtype, with the table's source; None when absent."""
    if not spec_id:
        return None
    rec = published("mamf")
    for row in rec["rows"]:
        if spec_id in row.get("spec_ids", []) and row["dtype"] == dtype:
            return {**row, "source": rec["source"]}
    return None


# ---------------------------------------------------------------- recording reference data on a GPU

def recording_sizes(kind: str, smoke: bool = False) -> dict[str, Any]:
    """The sizes a reference recording uses: full size for a GPU, tiny ones for a test of the recorder."""
    full = {
        "waves": {"dim": "n", "fixed": {"m": 2304, "k": 4096}, "start": 128, "stop": 8192, "step": 32, "dtype": "bf16"},
        "heads": {"h": 2560, "b": 4, "s": 2048, "dtype": "bf16", "min_d": 16, "max_d": 256},
        "swiglu": {"h": 4096, "tokens": 8192, "radius": 100, "step": 4, "dtype": "bf16"},
        "mamf": {"m": [1024, 16384, 512], "n": [1024, 16384, 512], "k": [1024, 16384, 512], "dtype": "bf16",
                 "stat": "mean"},
    }
    tiny = {
        "waves": {"dim": "n", "fixed": {"m": 64, "k": 64}, "start": 16, "stop": 96, "step": 16, "dtype": "fp32"},
        "heads": {"h": 128, "b": 1, "s": 32, "dtype": "fp32", "min_d": 32, "max_d": 128},
        "swiglu": {"h": 64, "tokens": 32, "radius": 4, "step": 4, "dtype": "fp32"},
        "mamf": {"m": [32, 64, 32], "n": [32, 64, 32], "k": [32, 64, 32], "dtype": "fp32", "stat": "mean"},
    }
    if kind not in full:
        raise InputError(f"unknown reference kind {kind!r}: use one of {', '.join(KINDS)}")
    return (tiny if smoke else full)[kind]


def record(kind: str, device=None, *, smoke: bool = False, root: Path | str | None = None,
           progress: bool = True) -> Path:
    """Measure one lesson's reference data on `device` and write it to data/ with its provenance."""
    import torch

    from perflab.core.device import describe, pick_device

    dev = torch.device(device) if device is not None else pick_device()
    info = describe(dev)
    p = recording_sizes(kind, smoke)
    fast: dict[str, Any] = {"rep_ms": 5, "warmup_ms": 1} if smoke else {}
    if kind == "waves":
        from perflab.gemm import shapes

        sms = int(info.details["sm_count"]) if info.kind == "cuda" else int(torch.get_num_threads())
        values = shapes.fine_values(p["start"], p["stop"], p["step"])
        res = shapes.sweep_dimension(p["dim"], values, p["fixed"], p["dtype"], dev, name="reference_waves",
                                     progress=progress, **({"rep_ms": 100, "warmup_ms": 25} if not smoke else fast))
        df = res.ok_frame()
        fit = shapes.fit_tile(list(df[p["dim"]]), list(df["median_s"]), p["dim"], p["fixed"], sms=sms)
        rows = df.loc[:, ["m", "n", "k", "dtype", "median_s", "tflops", "peak_fraction"]].to_dict("records")
        return record_reference("waves", rows, device=dev, params={**p, "sms": sms}, root=root,
                                summary={"best_fit": fit.best, "fits": fit.table.head(5).to_dict("records")})
    if kind == "heads":
        from perflab.gemm import heads

        res = heads.sweep_head_size(p["h"], b=p["b"], s=p["s"], dtype=p["dtype"], device=dev, min_d=p["min_d"],
                                        max_d=p["max_d"], name="reference_heads", progress=progress, **fast)
        df = res.ok_frame()
        rows = df.loc[:, ["h", "a", "d", "b", "s", "dtype", "seconds", "tflops"]].to_dict("records")
        return record_reference("heads", rows, device=dev, params=p, root=root)
    if kind == "swiglu":
        from perflab.gemm import swiglu

        s = swiglu.search(p["h"], p["tokens"], radius=p["radius"], step=p["step"], dtype=p["dtype"], device=dev,
                          name="reference_swiglu", progress=progress, **fast)
        d = s.as_dict()
        return record_reference("swiglu", d["candidates"], device=dev, params=p, root=root,
                                summary={k: v for k, v in d.items() if k not in {"candidates", "results_file"}})
    # mamf, the one kind left: recording_sizes refused every other
    from perflab.gemm import mamf

    ranges = {ax: mamf.parse_range(*p[ax], name=ax) for ax in ("m", "n", "k")}
    r = mamf.search(ranges["m"], ranges["n"], ranges["k"], dtype=p["dtype"], device=dev, stat=p["stat"],
                    name="reference_mamf", progress=progress, save_ceiling=not smoke, **fast)
    from perflab.core.hardware import peaks_for

    peaks = peaks_for(info)
    pub = published_mamf(peaks.spec.id if peaks.spec else None, p["dtype"])
    summary = {**r.as_dict(), "peak_tflops": peaks.get(p["dtype"]), "peak_source": peaks.source,
               "published": pub}
    summary.pop("results_file", None)
    summary.pop("ceiling_file", None)
    return record_reference("mamf", r.rows, device=dev, params=p, root=root, summary=summary)
