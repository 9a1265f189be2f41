"""Tests of `perflab.distributed.outcome`."""

from __future__ import annotations

from perflab.distributed.outcome import LaunchResult, RankOutcome

from .helpers import GLOO


def _result(ranks, *, timed_out=False, returncodes=(0,), agent_output="", nproc=None):
    return LaunchResult("perflab.distributed.workers.faulty", nproc or len(ranks), 1, GLOO, [["python", "-m", "x"]], 2.0,
                        30.0, timed_out, list(returncodes), ranks=ranks, agent_output=agent_output)


# ----------------------------------------------------------------------------- what a job's result says
def test_timeout_message_when_a_rank_never_started_and_others_finished():
    res = _result([RankOutcome(0, "ok"), RankOutcome(1, "timeout", started=False)], timed_out=True)
    assert res.message == ("rank 1 (it had not started yet: torchrun and `import torch` were still loading) did not "
                           "finish within 30 s; rank 0 had finished; every process was stopped")


def test_messages_when_no_rank_raised():
    assert _result([RankOutcome(0, "ok")], nproc=2).message == "only 1 of 2 ranks started (torchrun exit codes [0])"
    assert _result([RankOutcome(0, "ok"), RankOutcome(1, "unknown")]).message == "rank 1 did not finish (unknown)"
    assert (_result([RankOutcome(0, "ok")], returncodes=[1]).message
            == "torchrun exited with [1] although every rank finished")


def test_report_lists_failed_ranks_first_and_skips_the_ok_ones():
    ranks = [RankOutcome(0, "ok", stdout="fine"), RankOutcome(1, "stopped", stdout="stopped here"),
             RankOutcome(2, "raised", error="ValueError: boom", stderr="Traceback\nValueError: boom", error_time=1.0)]
    res = _result(ranks, returncodes=[1])
    lines = res.report().splitlines()
    assert lines[0] == "rank 2 raised ValueError: boom; rank 1 was stopped"
    assert lines[1] == "--- rank 2: raised (ValueError: boom) ---"
    assert "--- rank 1: stopped ---" in lines and "fine" not in lines
    d = res.as_dict()
    assert d["ok"] is False and d["world_size"] == 3 and d["ranks"][2]["error"] == "ValueError: boom"
    assert d["ranks"][1] == {"rank": 1, "status": "stopped", "exit_code": None, "error": None, "step": None,
                             "where": None, "pid": None, "local_rank": None, "node": None, "output_tail": "stopped here"}


def test_report_shows_torchrun_when_no_rank_started():
    res = _result([], returncodes=[1], nproc=2,
                  agent_output="torchrun: error: unrecognized arguments: --bogus\n")
    assert res.report().splitlines()[1:] == ["--- torchrun ---", "torchrun: error: unrecognized arguments: --bogus"]


def test_raise_for_status_returns_a_good_result():
    res = _result([RankOutcome(0, "ok"), RankOutcome(1, "ok")])
    assert res.raise_for_status() is res
