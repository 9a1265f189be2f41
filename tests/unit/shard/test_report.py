"""Tests of `perflab.shard.report`."""

from __future__ import annotations

import pytest

from perflab.core.errors import InputError
from perflab.shard.formulas import Replay, fsdp_comm
from perflab.shard.report import (
    Check,
    FsdpDetails,
    FsdpRankDetail,
    PeakHolds,
    PipelineRun,
    PpDetails,
    ShardReport,
    fmt_cell,
)
from perflab.workload.models import preset


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


def test_a_ranks_states_and_the_checks_as_lines():
    rep = ShardReport("fsdp", 2, {}, _fsdp().rows, [Check("loss vs one rank", [1.0], [1.0], "1e-4 relative", True,
                                                         "largest difference 0.0e+00"), Check("bytes", 3, 4, "exact", False)])
    assert rep.states_bytes(rank=1) == 4_000_016
    assert rep.checks_text() == "✓ loss vs one rank: largest difference 0.0e+00\n✗ bytes"
    assert rep.checks_text(values=True).splitlines()[1] == "✗ bytes: measured 3, predicted 4 (tolerance exact)"


def test_fsdps_own_share_of_each_peak_in_units_of_the_prediction():
    holds = PeakHolds({"unsharded parameters (gathered, kept)": 591_000, "all-gather buffers (a unit being gathered)": 793_000,
                       "unsharded gradients": 1_000, "reduce-scatter buffers (a unit's gradients)": 793_000},
                      1_384_000, 794_000, 2.0, 1.0, 1_384_000, 794_000)
    details = FsdpDetails({0: FsdpRankDetail({}, {}, 7_719_000, "FSDPMemTracker (live tensors by kind)", {}, holds)})
    table = ShardReport("fsdp", 2, {}, [], [], details).holds_table()
    row = table.iloc[0].to_dict()
    assert row["rank"] == 0 and row["peak (MB)"] == "7.72" and row["parameter units (of 2)"] == "2.00"
    assert row["unsharded gradients"] == "0.00100" and row["gradient units"] == "1.00"
    with pytest.raises(InputError, match="the peak's parts are FSDP's: this is pp"):
        ShardReport("pp", 2, {}, [], []).holds_table()


def test_the_collectives_and_losses_in_words():
    cfg = preset("tiny-gpt")
    text = FsdpDetails({}, fsdp_comm(cfg, 2), ["root", "blocks.0", "blocks.1"], {}, [6.954251, 6.2198],
                       [6.954252, 6.2198]).describe().splitlines()
    assert text[0].startswith("3 units (2 blocks + root): all-gathers 2·2 + 1 = 5, ")
    assert text[1:] == ["losses, FSDP     : [6.95425, 6.2198]", "losses, one rank : [6.95425, 6.2198]"]


def _pp_runs():
    return [PipelineRun(2, m, 1 / (m + 1), Replay(1.0, [0.5, 0.5], [1 / (m + 1)] * 2), 1 / (m + 1) + 0.001, 1.0,
                        1 / (m + 1) + 0.03, [0.5, 0.5], []) for m in (1, 4)]


def test_the_bubble_table_in_both_conventions_and_its_tolerance():
    table = PpDetails(_pp_runs(), "gpipe").table()
    assert list(table.columns) == ["m", "(p−1)/(m+p−1)", "replayed", "wall clock", "(p−1)/m", "replayed, of ideal time",
                                   "within ±0.05"]
    row = table.set_index("m").loc[4]
    assert row["(p−1)/(m+p−1)"] == "0.200" and row["(p−1)/m"] == "0.250" and row["within ±0.05"]
    assert not PpDetails(_pp_runs(), "gpipe").table(tolerance=0.0005).iloc[0, -1]


def test_the_micro_batches_each_stage_held_beside_gpipe_and_1f1b():
    rows = [{"rank": s, "m": 4, "max_in_flight": 4, "peak_bytes": 8192, "predicted_peak_bytes": 8192} for s in (0, 1)]
    table = ShardReport("pp", 2, {}, rows, [], PpDetails(_pp_runs(), "gpipe")).held_table()
    assert list(table["1F1B would hold"]) == ["4.10 kB", "2.05 kB"]  # p − s micro-batches on stage s
    assert list(table["held (bytes)"]) == ["8.19 kB", "8.19 kB"]
    with pytest.raises(InputError, match="the micro-batches held are the pipeline's: this is fsdp"):
        _fsdp().held_table()
