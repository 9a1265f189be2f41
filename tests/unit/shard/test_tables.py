"""Lesson 12's tables and panel, driven from outside the lesson."""

from perflab.course.widgets import Panel, int_slider, log2_slider
from perflab.shard import plots
from perflab.shard.run import ShardReport
from perflab.workload.models import preset


def test_the_panel_answers_four_stages_and_eight_microbatches():
    cfg = preset("tiny-gpt")
    panel = Panel(lambda ranks, microbatches: plots.explore(ranks, microbatches, None, None, cfg),
                  ranks=int_slider("ranks p", 2, 1, 16), microbatches=log2_slider("micro-batches m", 4, 1, 64))
    panel.set(ranks=4, microbatches=8)
    assert panel.last_error is None and "27.3 %" in panel.last[0]


def _fsdp():
    rows = [{"rank": r, "param_bytes": 1_000_000, "grad_bytes": 1_000_000, "optim_bytes": 2_000_016,
             "peak_bytes": 5_500_000, "comm_calls": 9, "comm_bytes": 4_000_000, "idle_s": 0.0123,
             "predicted_param_bytes": 1_000_000, "predicted_grad_bytes": 1_000_000, "predicted_optim_bytes": 2_000_000,
             "predicted_peak_bytes": 5_000_000, "predicted_comm_calls": 9, "predicted_comm_bytes": 4_000_000,
             "predicted_idle_s": None} for r in (0, 1)]
    details = {"estimate_components": {"states": 4_000_000, "activations": 1_000_000},
               "ranks": [{"peak_remainder": {"all-gathered block": 600_000, "freed early": -100_000},
                          "tracker_peak_bytes": 5_500_000}]}
    return ShardReport("fsdp", 2, {}, rows, [], details)


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
