"""Published sharding measurements, with their source (perflab/shard/data/torchtitan_benchmarks.json).

    >>> t = table("fsdp_8gpu")        # DataFrame; t.attrs["source"] says where every number was read
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from perflab.core.errors import InputError

DATA = Path(__file__).with_name("data") / "torchtitan_benchmarks.json"


@lru_cache(maxsize=1)
def load() -> dict[str, Any]:
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
