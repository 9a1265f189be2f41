"""Tests of `perflab.distributed.ranklogs`."""

from __future__ import annotations

from perflab.distributed import ranklogs
from perflab.distributed.outcome import LaunchResult

from .helpers import GLOO


def _result(ranks, *, timed_out=False, returncodes=(0,), agent_output="", nproc=None):
    return LaunchResult("perflab.distributed.workers.faulty", nproc or len(ranks), 1, GLOO, [["python", "-m", "x"]], 2.0,
                        30.0, timed_out, list(returncodes), ranks=ranks, agent_output=agent_output)


# ----------------------------------------------------------------------------- reading the run folder
def test_outcomes_from_torchrun_exit_codes_alone(tmp_path):
    summary = ("  rank      : 0 (local_rank: 0)\n  exitcode  : 0 (pid: 11)\n"
               "  rank      : 1 (local_rank: 1)\n  exitcode  : -15 (pid: 12)\n")
    res = _result([], returncodes=[1], agent_output=summary, nproc=3)
    got = ranklogs.outcomes(tmp_path, 3, 1, res)
    assert [(o.status, o.exit_code) for o in got] == [("ok", 0), ("stopped", -15), ("stopped", None)]
    plain = _result([], returncodes=[0], nproc=1)
    assert [(o.status, o.exit_code) for o in ranklogs.outcomes(tmp_path, 1, 1, plain)] == [("ok", 0)]


def test_rank_logs_ignore_what_is_not_a_rank_folder(tmp_path):
    base = tmp_path / "logs" / "node0" / "abc" / "attempt_0"
    (base / "1").mkdir(parents=True)
    (base / "error.json").write_text("{}")
    assert ranklogs.rank_logs(tmp_path, 2, 1, {}) == {1: base / "1"}
    assert ranklogs.read_tail(tmp_path / "missing.log") == ""


def test_stack_dump_edge_cases():
    dump = ('Current thread 0x01 (most recent call first):\n\n  File "/w/faulty.py", line 31 in body\n'
            "\nThread 0x02:\n")
    assert ranklogs.parse_stack_dump(dump) == (None, None)  # the last thread's block has no frames
    one = 'Current thread 0x01:\n  (garbage)\n  File "/w/faulty.py", line 31 in body\nExtension modules: x\n'
    assert ranklogs.parse_stack_dump(one) == ("faulty.py:31 in body", None)


def test_parse_helpers():
    err = "Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\nZeroDivisionError: division by zero\n"
    assert ranklogs.parse_exception(err) == "ZeroDivisionError: division by zero"
    dump = ("Current thread 0x01 (most recent call first):\n"
            '  File "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce\n'
            '  File "/v/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper\n'
            '  File "/w/faulty.py", line 34 in body\n')
    where, waiting = ranklogs.parse_stack_dump(dump)
    assert where == "faulty.py:34 in body, inside all_reduce()" and waiting == "all_reduce"
    assert ranklogs.parse_stack_dump('Current thread 0x01:\n  File "/w/faulty.py", line 31 in body\n') == ("faulty.py:31 in body", None)
