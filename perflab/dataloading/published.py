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
