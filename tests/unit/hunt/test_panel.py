"""Tests of `perflab.hunt.panel`: lesson 14's panel and its one-fix-at-a-time measurement."""

from dataclasses import replace
from types import SimpleNamespace

from perflab.core.quietness import UNKNOWN, Quietness
from perflab.hunt import panel
from perflab.hunt.report import Rerun
from perflab.hunt.sizes import SMOKE
from perflab.hunt.step import Timed

QUIET = Quietness("quiet", 0.0, 1.0, 1, 0.0, 1, "")
BUSY = Quietness("disturbed", 0.7, 1.0, 1, 0.7, 1, "other programs used 70 % of 1 core")
SZ = replace(SMOKE, worker_start_s=0.0, io_ms=1.0, epoch_steps=2, reps=1)


def _rerun(parity_ok=True, quietness=QUIET) -> Rerun:
    t = {k: Timed(k, s, {"data": s}, [s], 1.0, None, quietness) for k, s in (("before", 0.1), ("with your fixes", 0.075))}
    return Rerun(t, 0.1, 0.075, 0.25, parity_ok, 0.0)


def test_the_next_fix_is_kept_only_where_parity_holds():
    kept = panel.NextFix(["use_sdpa"], _rerun(), ["loader_workers", "use_sdpa"])
    assert kept.share == 0.25
    assert kept.text() == "parity kept: use_sdpa kept; fixes so far: loader_workers, use_sdpa"
    broken = panel.NextFix(["half_batch"], _rerun(parity_ok=False), ["loader_workers"])
    assert broken.text() == "parity BROKEN by half_batch: untick it, it changed the model"


def test_no_verdict_from_a_busy_machine():
    busy = panel.NextFix(["use_sdpa"], _rerun(quietness=BUSY), ["use_sdpa"])
    assert busy.share is None
    assert "inconclusive: the machine was busy (other programs used 70 % of 1 core)" in busy.text()
    res = _rerun(quietness=BUSY)
    assert res.headline() is None and _rerun(quietness=UNKNOWN).headline() == 0.25
    assert res.text().startswith("inconclusive: the machine was busy") and "relative difference 0.0e+00" in res.text()
    assert _rerun().text("the step as given").startswith("won back 25% of the step; parity: loss within fp32's "
                                                         "tolerance of the step as given: True")


def test_nothing_new_ticked_measures_nothing():
    nxt = panel.next_fix(SimpleNamespace(draw=("loader",), sizes=SZ), {"loader_workers": True, "use_sdpa": False},
                         ["loader_workers"])
    assert nxt.rerun is None and nxt.share is None and nxt.adopted == ["loader_workers"]
    assert nxt.text() == "no new fix ticked: tick one in the panel above, then run this cell again"


def test_the_warm_up_and_the_panel_time_the_step_with_its_fix():
    warm = panel.warm_up(SZ)
    assert warm.rerun.parity_ok and set(warm.evidence) >= {"shares", "counters", "op_calls"}
    assert warm.evidence["counters"]["loader_workers"] == 0  # the warm-up's regression: no workers
    hunt = SimpleNamespace(draw=("loader",), sizes=SZ)
    fig, line = panel.with_fixes(hunt, loader_workers=True, use_sdpa=False)
    assert line.endswith("parity kept") and ("won back" in line or "inconclusive" in line)
    assert fig.axes[0].get_xlabel().startswith("milliseconds per optimizer step")
    nxt = panel.next_fix(hunt, {"loader_workers": True}, [])
    assert nxt.new == ["loader_workers"] and nxt.adopted == ["loader_workers"]
