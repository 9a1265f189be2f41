"""Published input-pipeline measurements, with their source (perflab/dataloading/data/published.json).

    >>> published_2x2()        # pin_memory x non_blocking on an A100 80GB PCIe, seconds as published
    >>> published_workers()    # step time against num_workers
    >>> lcg_story()            # the LCG shuffle that replaced per-worker index lists
"""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).with_name("data")


def published_2x2():
    """The published A100 80GB PCIe 2×2 table (seconds as published) as a DataFrame; its source
    (Stas Bekman, Machine Learning Engineering, training/performance/) is in the data file."""
    import pandas as pd

    d = json.loads((DATA / "published.json").read_text())["pin_memory_non_blocking"]
    df = pd.DataFrame(d["rows"])
    df.attrs["source"] = f"{d['gpu']} · {d['source']}"
    return df


def published_workers():
    import pandas as pd

    d = json.loads((DATA / "published.json").read_text())["num_workers"]
    df = pd.DataFrame(d["rows"])
    df.attrs["source"] = d["source"]
    return df


def lcg_story() -> dict:
    return json.loads((DATA / "published.json").read_text())["lcg_shuffle"]


def pin_memory_table():
    """The published 2×2 for a person: each setting and its published time per iteration (seconds)."""
    import pandas as pd

    from perflab.core.readout import seconds

    return pd.DataFrame([{"pin_memory": bool(r["pin_memory"]), "non_blocking": bool(r["non_blocking"]),
                          "average time per iteration (published)": seconds(float(r["avg_time_s"]))}
                         for r in pin_memory_rows()])


def pin_memory_rows() -> list[dict]:
    """The published 2×2's rows as the data file holds them: pin_memory, non_blocking, avg_time_s (seconds)."""
    return list(json.loads((DATA / "published.json").read_text())["pin_memory_non_blocking"]["rows"])


def pin_memory_source() -> str:
    """Where the 2×2 comes from: the GPU and the source."""
    return str(published_2x2().attrs["source"])
