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
    for args in (("--pool", "gc,nope"), ("--k", "0"), ("--k", "99"), ("--k", "3", "--pool", "loader,respawn,gc")):
        r = perflab("hunt", *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_the_teachers_view_is_the_notebooks_draw_mode_for_mode(monkeypatch):
    """Lesson 14 and lab 14 draw with `lab14.start`, from `draw.lesson_pool(smoke)`: the command
    draws from the same pool, so a learner's row is the draw their notebook makes (before costs)."""
    from perflab.hunt import draw, lab14

    seen = {}

    def fake_draw_for(user, k, pool, costs=None):
        seen["pool"] = pool
        raise SystemExit  # stop before any step is built

    pools = {}
    with monkeypatch.context() as m:
        m.setattr(draw, "draw_for", fake_draw_for)
        for smoke in (True, False):
            try:
                lab14.start(smoke, user="ada", progress=None)
            except SystemExit:
                pass
            pools[smoke] = seen["pool"]
    for smoke in (True, False):
        r = perflab("hunt", "--learners", "ada", "--json", *(["--smoke"] if smoke else []))
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert tuple(out["pool"]) == pools[smoke] == draw.lesson_pool(smoke)
        assert out["draws"][0]["order"].split(",")[0] in out["draws"][0]["regressions"].split(",")
