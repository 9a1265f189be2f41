"""Published sharding measurements, with their source (perflab/shard/data/torchtitan_benchmarks.json).

    >>> t = table("fsdp_8gpu")        # DataFrame; t.attrs["source"] says where every number was read
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from perflab.core.errors import InputError

DATA = Path(__file__).with_name("data") / "torchtitan_benchmarks.json"


@lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    """The data file as it is: its source, hardware and tables (lesson 15's `perflab.plan.published`
    reads it too). `table` gives one table, typed as a DataFrame."""
    return json.loads(DATA.read_text())


def table_ids() -> list[str]:
    return [t["id"] for t in load()["tables"]]


def table(table_id: str):
    """One published table as a DataFrame; `attrs["source"]`: title, project, URL, section."""
    import pandas as pd

    data = load()
    for t in data["tables"]:
        if t["id"] == table_id:
            df = pd.DataFrame(t["rows"], columns=t["columns"])
            df.attrs["source"] = (f"{data['source']['title']} ({data['source']['author']}), {t['url']}, "
                                  f"{t['section']} Hardware: {data['hardware']}.")
            return df
    raise InputError(f"unknown table {table_id!r}: use one of {', '.join(table_ids())}")


@dataclass(frozen=True)
class InterleavedGain:
    """Interleaved 1F1B against 1F1B in one published table: tokens/s per GPU and memory (GiB) of each
    schedule, the throughput gain and the memory change (fractions: 0.28 = +28 %), and the source."""

    tokens_per_s_per_gpu: dict[str, float]
    memory_gib: dict[str, float]
    throughput_gain: float
    memory_change: float
    source: str


def interleaved_1f1b_gain() -> InterleavedGain:
    """Interleaved 1F1B against 1F1B in torchtitan's table 5 (Llama 3.1 405B, 512 H100s, PP 8):
    tokens/s per GPU and memory of each, and the ratios, computed from the table; `source` says where.
    The table does not give the number of chunks per device (v)."""
    t = table("pp_405b").set_index("schedule")
    base, inter = t.loc["1F1B"], t.loc["Interleaved 1F1B"]
    return InterleavedGain({"1F1B": float(base.tokens_per_s_per_gpu), "Interleaved 1F1B": float(inter.tokens_per_s_per_gpu)},
                           {"1F1B": float(base.memory_gib), "Interleaved 1F1B": float(inter.memory_gib)},
                           float(inter.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu - 1),
                           float(inter.memory_gib / base.memory_gib - 1), t.attrs["source"])
