"""Tests of `perflab.shard.report`."""

from __future__ import annotations

import pytest

from perflab.core.errors import InputError
from perflab.shard.formulas import Replay
from perflab.shard.report import (
    Check,
    FsdpDetails,
    FsdpRankDetail,
    PipelineRun,
    PpDetails,
    ShardReport,
    fmt_cell,
)


def _fsdp():
    rows = [{"rank": r, "param_bytes": 1_000_000, "grad_bytes": 1_000_000, "optim_bytes": 2_000_016,
             "peak_bytes": 5_500_000, "comm_calls": 9, "comm_bytes": 4_000_000, "idle_s": 0.0123,
             "predicted_param_bytes": 1_000_000, "predicted_grad_bytes": 1_000_000, "predicted_optim_bytes": 2_000_000,
             "predicted_peak_bytes": 5_000_000, "predicted_comm_calls": 9, "predicted_comm_bytes": 4_000_000,
             "predicted_idle_s": None} for r in (0, 1)]
    rank0 = FsdpRankDetail({}, {}, 5_500_000, "FSDPMemTracker (live tensors by kind)",
                           {"all-gathered block": 600_000, "freed early": -100_000})
    details = FsdpDetails({0: rank0}, estimate_components={"states": 4_000_000, "activations": 1_000_000})
    return ShardReport("fsdp", 2, {}, rows, [Check("x", 1, 1, "exact", True)], details)


def test_the_fsdp_table_names_its_quantities_with_units_and_never_shows_none():
    df = _fsdp().table()
    assert list(df.columns) == ["rank 0", "rank 1", "predicted"]
    assert df.loc["parameters", "rank 0"] == "1.00 MB" and df.loc["idle time", "predicted"] == "not predicted"
    assert df.loc["idle time", "rank 1"] == "0.012 s"
    cells = df.to_numpy().ravel().tolist()
    assert not any(c is None or c == "None" for c in cells) and len(df.columns) <= 5


def test_the_peak_table_calls_its_middle_rows_differences_and_signs_them():
    df = _fsdp().peak_table()
    assert df.loc["difference: freed early", "bytes"] == "−100 kB"
    assert df.loc["difference: all-gathered block", "bytes"] == "+600 kB"
    assert df.iloc[0]["bytes"] == "5.00 MB" and df.iloc[-1]["bytes"] == "5.50 MB"


def test_cells_checks_and_json():
    assert fmt_cell("idle_s", 0.01234) == "0.012 s" and fmt_cell("comm_calls", 4) == "4"
    assert fmt_cell("x", 0.123456) == "0.123" and fmt_cell("peak_bytes", None) == "—"
    c = Check("bubble, m=4", 0.43, 0.429, "±0.05", 1, "hand-offs")
    assert c.ok is True and c.line() == "✓ bubble, m=4: measured 0.43, predicted 0.429 (tolerance ±0.05); hand-offs"
    d = _fsdp().as_dict()
    assert d["checks"] == [{"name": "x", "measured": 1, "predicted": 1, "tolerance": "exact", "ok": True, "note": ""}]
    assert list(d["details"]["ranks"]["0"]) == ["named", "peak_parts", "tracker_peak_bytes", "peak_source",
                                                 "peak_remainder", "peak_holds"]
    assert ShardReport("pp", 2, {}, [], []).as_dict()["details"] == {}


def test_the_peak_table_is_fsdps_and_a_run_is_found_by_m():
    runs = [PipelineRun(2, m, 1 / (m + 1), Replay(1.0, [0.5, 0.5], [0.5, 0.5]), 0.5, 1.0, 0.5, [0.5, 0.5], [])
            for m in (1, 2)]
    pp = ShardReport("pp", 2, {}, [], [], PpDetails(runs, "gpipe"))
    with pytest.raises(InputError, match="the peak table is FSDP's: this is pp"):
        pp.peak_table()
    with pytest.raises(InputError, match="no run with m = 4: the runs have m = 1, 2"):
        PpDetails(runs, "gpipe").run(4)
