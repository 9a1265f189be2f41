"""Tests of `perflab.tune.panel`: the learner's own ladder, its rungs applied in the ladder's order."""

from perflab.tune import panel, runner
from perflab.tune.ladder import preset

from .helpers import CPU


def test_the_panel_climbs_the_ticked_rungs_in_the_ladders_order(monkeypatch):
    climbed = []

    def run_ladder(tp, rungs, *, device):  # stands in for the measured ladder (runner's own tests measure it)
        climbed.append(list(rungs))
        rows = [{"rung": r, "step_s": 0.1, "tokens_per_s": 1e4, "mfu": None, "hfu": None, "peak_bytes": 2**20,
                 "loss_delta": 0.0, "speedup_vs_previous": 1.0, "speedup_vs_baseline": 1.25 if r == "sdpa" else 1.0,
                 "interval": None, "adopted": r == "sdpa", "verdict": "adopted" if r == "sdpa" else "reference",
                 "breakdown": {"compute": 0.1}} for r in rungs]
        return runner.LadderResult(tp.name, "cpu", rows, None, "t.jsonl")

    monkeypatch.setattr(runner, "run_ladder", run_ladder)
    fig, table = panel.my_ladder(preset("smoke"), ["baseline", "bf16", "sdpa", "loader"], CPU,
                                 loader=False, sdpa=True, bf16=True)
    assert climbed == [["baseline", "bf16", "sdpa"]]
    assert fig.axes[0].get_title() == "your ladder: 1.25× the baseline"
    assert list(table["rung"]) == ["baseline", "bf16", "sdpa"]
