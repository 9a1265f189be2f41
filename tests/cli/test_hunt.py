"""`perflab hunt`: the teacher's view of the draws, one-line errors."""

import json

from clirun import perflab


def test_the_teacher_sees_each_learners_draw_with_k_and_pool():
    r = perflab("hunt", "--learners", "ada,bob", "--k", "2", "--pool", "gc,loader,host_stats", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [d["learner"] for d in out["draws"]] == ["ada", "bob"]
    assert all(d["k"] == 2 and set(d["regressions"].split(",")) <= {"gc", "loader", "host_stats"} for d in out["draws"])
    assert "graph_break" in out["not_here"]


def test_bad_options_are_one_line():
    for args in (("--pool", "gc,nope"), ("--k", "0")):
        r = perflab("hunt", *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
