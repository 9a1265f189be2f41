"""Property-based tests (Hypothesis) of the parsers and formulas that take outside input:
`nvidia-smi topo -m` tables round-trip in every layout, planted idle gaps in random traces are
diagnosed within a tolerance, and the ETTR optimum is the peak of the curve shown."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("hypothesis", reason="hypothesis is not installed: pip install -e '.[test]'")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from perflab.numa.smi_topo import parse_topo  # noqa: E402
from perflab.numa.topology import format_cpulist  # noqa: E402
from perflab.profiling import ettr as E  # noqa: E402
from perflab.profiling.diagnose import diagnose  # noqa: E402

SETTINGS = settings(max_examples=60, deadline=None, database=None,  # no .hypothesis folder in the checkout
                    suppress_health_check=[HealthCheck.too_slow])
LINKS = ["NV1", "NV4", "NV12", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"]

# ------------------------------------------------------------------------------ topology tables


@st.composite
def tables(draw):
    n_gpu = draw(st.integers(1, 8))
    n_nic = draw(st.integers(0, 3))
    numa_cols = draw(st.booleans())
    devs = [f"GPU{i}" for i in range(n_gpu)] + [f"NIC{i}" for i in range(n_nic)]
    links = {}
    for i, a in enumerate(devs):
        for b in devs[i:]:
            v = "X" if a == b else draw(st.sampled_from(LINKS))
            links.setdefault(a, {})[b] = v
            links.setdefault(b, {})[a] = v
    gpus = []
    for g in range(n_gpu):
        kind = draw(st.sampled_from(["list", "list", "blank", "na"]))
        cpus = sorted(draw(st.sets(st.integers(0, 255), min_size=1, max_size=40))) if kind == "list" else []
        numa = draw(st.one_of(st.none(), st.integers(0, 7))) if numa_cols else None
        gpus.append({"gpu": g, "cpu_affinity": cpus, "numa_node": numa, "_cpu_text": "N/A" if kind == "na" else
                     format_cpulist(cpus)})
    return devs, links, gpus, numa_cols


def render(devs, links, gpus, numa_cols) -> str:
    """As nvidia-smi writes it: tab-separated, a leading tab on the header, two tabs after the NUMA value."""
    extra = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"] if numa_cols else ["CPU Affinity"]
    out = ["\t" + "\t".join(devs + extra)]
    for d in devs:
        cells = [d] + [" X " if links[d][e] == "X" else links[d][e] for e in devs]
        if d.startswith("GPU"):
            g = gpus[int(d[3:])]
            cells.append(g["_cpu_text"])
            if numa_cols:
                cells += ["N/A" if g["numa_node"] is None else str(g["numa_node"]), "", "N/A"]
        out.append("\t".join(cells))
    return "\n".join(out) + "\n\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe and the SMP interconnect\n"


def layouts(text: str) -> dict[str, str]:
    spaces = "\n".join(ln.expandtabs(8).rstrip() for ln in text.splitlines()) + "\n"
    first, rest = text.split("\n", 1)
    return {"tabs": text, "spaces": spaces,
            "ansi": "\x1b[1m\x1b[4m" + first + "\x1b[0m\n" + rest,
            "ansi_spaces": "\x1b[4m" + spaces.split("\n", 1)[0] + "\x1b[0m\n" + spaces.split("\n", 1)[1],
            "crlf": text.replace("\n", "\r\n"), "prompt": "me@box:~$ nvidia-smi topo -m\n" + text}


@SETTINGS
@given(tables())
def test_topology_tables_round_trip_in_every_layout(t):
    devs, links, gpus, numa_cols = t
    want = [{k: v for k, v in g.items() if not k.startswith("_")} for g in gpus]
    for name, text in layouts(render(devs, links, gpus, numa_cols)).items():
        got = parse_topo(text)
        assert got["devices"] == devs, name
        assert got["links"] == links, name
        assert got["gpus"] == want, (name, text)


# ------------------------------------------------------------------------------ planted idle gaps

@st.composite
def planted_traces(draw):
    """A CPU trace of 1-4 ProfilerStep ranges, each a row of compute ops (100 µs - 3 ms) with idle gaps
    planted between them: under a DataLoader fetch, under an `aten::item` sync, or under nothing."""
    n_steps = draw(st.integers(1, 4))
    ev, t = [], 0
    planted = {"data_wait": 0.0, "host_sync": 0.0, "none": 0.0}
    for s in range(n_steps):
        start = t
        body = []
        for _ in range(draw(st.integers(2, 12))):
            dur = draw(st.integers(100, 3000))
            body.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": dur})
            t += dur
            kind = draw(st.sampled_from(["none", "data_wait", "host_sync", None, None]))
            if kind is not None:
                gap = draw(st.integers(50, 5000))
                name = {"data_wait": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                        "host_sync": "aten::item"}.get(kind)
                if name:
                    body.append({"ph": "X", "cat": "user_annotation" if kind == "data_wait" else "cpu_op",
                                 "name": name, "pid": 1, "tid": 1, "ts": t, "dur": gap})
                planted[kind] += gap * 1e-6
                t += gap
                dur = draw(st.integers(100, 3000))  # a step ends on an op: every gap sits between two ops
                body.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t, "dur": dur})
                t += dur
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 1}", "pid": 1, "tid": 1,
                   "ts": start, "dur": t - start})
        ev += body
        t += draw(st.integers(0, 2000))  # time between steps is outside every step
    return {"traceEvents": ev}, n_steps, planted


@SETTINGS
@given(planted_traces())
def test_planted_idle_gaps_are_diagnosed_within_tolerance(case):
    trace, n_steps, planted = case
    d = diagnose(trace)
    assert d.steps == n_steps
    got = {c.cause: c.seconds for c in d.causes}
    tol = 1e-6  # the trace's timestamps are whole microseconds
    for cause in ("data_wait", "host_sync"):
        assert math.isclose(got.get(cause, 0.0), planted[cause] / n_steps, abs_tol=tol), (cause, got, planted)
    assert math.isclose(d.unattributed_s, planted["none"] / n_steps, abs_tol=tol)
    assert math.isclose(d.idle_s, sum(planted.values()) / n_steps, abs_tol=tol)


# ------------------------------------------------------------------------------ ETTR's optimum

@SETTINGS
@given(ckpt=st.floats(0.01, 600), restart=st.floats(0, 600), mtbf=st.floats(5, 1e6),
       model=st.sampled_from(["exact", "first_order"]))
def test_the_ettr_optimum_is_the_peak_of_the_curve_shown(ckpt, restart, mtbf, model):
    f = E.MODELS[model]
    best = E.optimal_interval(ckpt, restart, mtbf, model)
    top = f(best, ckpt, restart, mtbf)
    # the curve a lesson draws (mtbf is the job's, in minutes: 1 GPU of mtbf/60 hours)
    curve = E.curve_around_optimum(1, mtbf / 60, ckpt, restart, model=model)
    peak = max(curve, key=lambda p: p[1])
    assert math.isclose(peak[0], best, rel_tol=1e-9) or peak[1] <= top + 1e-12
    assert all(y <= top + 1e-12 for _, y in curve)
    # and no interval on a dense grid does better
    grid = [mtbf * 10 ** (k / 50) for k in range(-250, 51)]
    assert all(f(t, ckpt, restart, mtbf) <= top + 1e-9 for t in grid)
    # the first-order model is never above the exact one (it is the pessimistic one the lesson says)
    assert all(E.ettr_first_order(t, ckpt, restart, mtbf) <= E.ettr_exact(t, ckpt, restart, mtbf) + 1e-12
               for t in grid[::10])


# the job: delta 30 min, R 20 min, M 293 min -> 0.573 (first order: 0.543)
@pytest.mark.parametrize("ckpt, restart, mtbf, want", [(30, 20, 293, 0.573), (5, 2, 60, None), (0.5, 10, 5000, None)])
def test_exact_ettr_agrees_with_a_monte_carlo_job(ckpt, restart, mtbf, want):
    tau = E.optimal_interval(ckpt, restart, mtbf)
    exact = E.ettr_exact(tau, ckpt, restart, mtbf)
    mc = E.monte_carlo(tau, ckpt, restart, mtbf, work=tau * 40_000, seed=1)
    assert abs(mc - exact) < 0.005
    if want is not None:
        assert abs(exact - want) < 0.0005 and E.ettr_first_order(tau, ckpt, restart, mtbf) < want - 0.02
