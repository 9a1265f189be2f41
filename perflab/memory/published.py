"""The papers' memory figures beside perflab's estimate of them (lesson 03): the ZeRO paper's Figure 1 and
Korthikanti et al.'s Table 2, and their layer's formula beside perflab's own model.

The published inputs and figures are data with their sources (`data/memory_references.json`, read by
`references`); every figure shown next to them is computed by `perflab.memory.estimate`, and
tests/unit/memory/test_estimate.py holds the estimate to the papers' numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from perflab.core.jsonable import JSON, package_json
from perflab.memory.estimate import activations_per_layer_bytes, estimate


@lru_cache(maxsize=1)
def references() -> JSON:
    """Published figures shipped with perflab (`perflab/memory/data/memory_references.json`), as read."""
    return package_json("perflab.memory", "memory_references.json")


@dataclass(frozen=True)
class ZeroFigure:
    """Model states per GPU for ZeRO stages 0–3, perflab's estimate beside the paper's printed figure (GB)."""

    params: float
    dp: int
    stages: tuple[tuple[str, float, float], ...]  # (stage and label, perflab's bytes, the paper's GB)
    source: str

    def table(self):
        import pandas as pd

        from perflab.core.readout import plain

        return pd.DataFrame([{"ZeRO stage": label, "perflab (GB)": plain(b / 1e9, 4), "paper (GB)": plain(gb, 4)}
                             for label, b, gb in self.stages])


def zero_figure1() -> ZeroFigure:
    """The ZeRO paper's Figure 1: 7.5B parameters, mixed-precision Adam with fp16 gradients, 64 data-parallel
    GPUs; each stage's model states per GPU estimated by perflab and as the paper prints them."""
    ref = references()["zero_figure1"]
    stages = tuple((f"{z} ({ref['labels'][str(z)]})",
                    estimate(ref["params"], precision="mixed", grad_dtype="fp16", optimizer="adamw", zero=z,
                             dp=ref["dp"]).total_bytes, float(ref["gb_per_gpu"][str(z)])) for z in range(4))
    return ZeroFigure(float(ref["params"]), int(ref["dp"]), stages, ref["source"])


@dataclass(frozen=True)
class ActivationTable:
    """Korthikanti et al.'s Table 2 for one layer shape: each configuration's formula and its bytes per layer."""

    s: int
    h: int
    a: int
    t: int
    rows: tuple[tuple[str, str, float], ...]  # (configuration, the paper's formula, bytes per layer)
    source: str

    def table(self):
        import pandas as pd

        from perflab.core.readout import num

        return pd.DataFrame([{"configuration": c, "Table 2 formula": f, "bytes per layer (GB)": num(b / 1e9)}
                             for c, f, b in self.rows])


def korthikanti_table2(s: int, h: int, a: int, t: int = 8, b: int = 1) -> ActivationTable:
    """Table 2's rows (tensor and sequence parallelism, selective and full recomputation) at sequence s,
    hidden size h, a heads, tensor-parallel degree t (where a row parallelises) and micro-batch b."""
    ref = references()["korthikanti_table2"]
    rows = tuple((r["configuration"], r["formula"],
                  activations_per_layer_bytes(s, b, h, a, t=r.get("t", t), sp=r["sp"], recompute=r["recompute"]))
                 for r in ref["rows"])
    return ActivationTable(int(s), int(h), int(a), int(t), rows, ref["source"])
