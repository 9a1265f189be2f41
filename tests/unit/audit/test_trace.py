"""`perflab audit --trace`: a job read from its ranks' traces, checked against HolisticTraceAnalysis on real
public multi-GPU traces (tests/corpus/traces/public, sources in SOURCES.json) and on hand-built jobs whose
answers are known by construction (a planted straggler, a planted late arrival at a collective, a planted
overlap of communication with compute; `jobs.py`)."""

import contextlib
import gzip
import io
import json
import logging
import shutil
import warnings
from pathlib import Path

import pytest

from perflab.audit import trace as jt
from perflab.core.errors import InputError

from .jobs import rank_trace, write_job

PUBLIC = Path(__file__).resolve().parents[2] / "corpus" / "traces" / "public"
JOBS = ("hta_sampled_job", "mi250_minitoy")
CPU_TRACE = Path(__file__).resolve().parents[2] / "corpus" / "traces" / "tb_handler"


# ------------------------------------------------------------------------------- against HTA
def hta_tables(folder: Path):
    hta = pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis is not installed (the hta extra)")
    quiet = io.StringIO()
    level = logging.getLogger().level
    try:
        logging.getLogger().setLevel(logging.ERROR)
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ta = hta.TraceAnalysis(trace_dir=str(folder))
            temporal = ta.get_temporal_breakdown(visualize=False)
            idle = ta.get_idle_time_breakdown(ranks=ta.t.get_ranks(), visualize=False)[0]
    finally:
        logging.getLogger().setLevel(level)
    return temporal, idle


@pytest.mark.parametrize("job", JOBS)
def test_shares_agree_with_holistic_trace_analysis_on_public_gpu_traces(job):
    folder = PUBLIC / job
    temporal, idle = hta_tables(folder)
    rep = jt.audit_traces(folder)
    assert sorted(r.rank for r in rep.ranks) == sorted(temporal["rank"].tolist())
    for r in rep.ranks:
        h = temporal[temporal["rank"] == r.rank].iloc[0]
        assert abs(100 * r.shares["idle"] - h["idle_time_pctg"]) <= 2
        assert abs(100 * r.shares["compute"] - h["compute_time_pctg"]) <= 2
        assert abs(100 * r.non_compute_share - h["non_compute_time_pctg"]) <= 2
        assert abs(100 * (1 - r.shares["compute"] - r.shares["idle"]) - h["non_compute_time_pctg"]) <= 2
        rows = idle[idle["rank"] == r.rank]
        assert {str(s) for s in rows["stream"]} == set(r.idle_by_stream_s)
        for _, row in rows.iterrows():
            mine = r.idle_by_stream_s[str(row["stream"])]
            total = sum(mine.values())
            if total > 0:  # HTA gives NaN for a stream with no idle time
                assert abs(mine[row["idle_category"]] / total - row["idle_time_ratio"]) <= 0.02
            assert abs(mine[row["idle_category"]] * 1e6 - row["idle_time"]) <= 1  # µs, HTA rounds to 0.01


@pytest.mark.parametrize("job", JOBS)
def test_public_traces_shares_add_up_and_name_no_guessed_peak(job):
    rep = jt.audit_traces(PUBLIC / job, flops_per_step=1e12)
    for r in rep.ranks:
        assert sum(r.shares.values()) == pytest.approx(1.0)
        assert all(v >= 0 for v in r.shares.values())
        assert r.step_s_median > 0
        assert all(r.exposed_comm_s[n] <= r.comm_s[n] + 1e-12 for n in r.steps)
        if r.idle_split:
            assert sum(r.idle_split.values()) == pytest.approx(1.0)
    # neither job names a GPU of perflab's table (no deviceProperties name; 'AMD Radeon Graphics')
    assert rep.mfu is not None and rep.mfu.mfu is None and "peak unknown" in rep.mfu.peak_source
    assert "Job audit" in rep.summary()


def test_the_sampled_job_is_two_ranks_of_128_with_their_steps():
    rep = jt.audit_traces(PUBLIC / "hta_sampled_job")
    j = rep.to_json()
    assert tuple(j) == jt.JOB_FIELDS and all(tuple(r) == jt.RANK_FIELDS for r in j["ranks"])
    assert json.loads(json.dumps(j)) == j  # JSON-ready: step numbers and ranks as keys are text
    assert rep.world_size == 128 and rep.ranks_found == 2 and rep.steps == [551, 552]
    assert any("2 of the job's 128" in n for n in rep.notes)
    assert "no verdict" in rep.stragglers.verdict  # two ranks: no straggler can be called


# ------------------------------------------------------------------------------- planted jobs
def test_a_planted_straggler_and_the_wait_it_costs_the_others(tmp_path):
    # rank 2 computes 3 ms longer, so it starts every all-reduce 3 ms after the others
    traces = [rank_trace(r, 4, compute_us=6_000 + (3_000 if r == 2 else 0)) for r in range(4)]
    rep = jt.audit_traces(write_job(tmp_path / "job", traces))
    st = rep.stragglers
    assert st.ranks == [2] and list(st.by_compute) == [2] and st.by_step == {}
    c = rep.collectives
    assert c.matched == 3 and c.unmatched == 0
    # per step, ranks 0, 1 and 3 each wait 3 ms for rank 2
    assert c.held_up_others_s[2] == pytest.approx(3 * 3e-3, rel=1e-9)
    assert c.held_up_others_s[0] == c.held_up_others_s[1] == c.held_up_others_s[3] == 0
    assert c.waited_s[0] == pytest.approx(3e-3, rel=1e-9) and c.waited_s[2] == 0


def test_no_straggler_when_ranks_agree(tmp_path):
    rep = jt.audit_traces(write_job(tmp_path / "job", [rank_trace(r, 4) for r in range(4)]))
    assert rep.stragglers.ranks == [] and rep.stragglers.verdict.startswith("none")


def test_exposed_communication_is_what_compute_does_not_hide(tmp_path):
    # all-reduce of 2 ms starting 500 µs before the 6 ms compute kernel ends: 1.5 ms exposed per step
    rep = jt.audit_traces(write_job(tmp_path / "job", [rank_trace(r, 2, overlap_us=500) for r in range(2)]))
    for r in rep.ranks:
        assert all(v == pytest.approx(1.5e-3) for v in r.exposed_comm_s.values())
        assert all(v == pytest.approx(2e-3) for v in r.comm_s.values())
        assert r.step_s == {1: pytest.approx(0.01), 2: pytest.approx(0.01), 3: pytest.approx(0.01)}


def test_mfu_at_the_peak_of_the_gpu_the_traces_name(tmp_path):
    from perflab.core.hardware import lookup

    folder = write_job(tmp_path / "job", [rank_trace(r, 2) for r in range(2)])
    rep = jt.audit_traces(folder, flops_per_step=4e12, six_n_flops_per_step=3e12, dtype="bf16")
    peak = lookup("NVIDIA H100 80GB HBM3").peak("bf16")
    m = rep.mfu
    assert m is not None and m.peak_tflops == peak and m.gpus == 2 and m.step_s == pytest.approx(0.01)
    assert m.mfu == pytest.approx(4e12 / (0.01 * 2 * peak * 1e12))
    assert m.mfu_6n == pytest.approx(3e12 / (0.01 * 2 * peak * 1e12))
    assert "MFU:" in rep.summary()
    assert list(rep.to_json()["mfu"]) == ["flops_per_step", "six_n_flops_per_step", "dtype", "step_s", "gpus",
                                          "peak_tflops", "mfu", "mfu_6n", "peak_source"]


def test_an_mfu_above_the_peak_is_not_shown(tmp_path):
    """MFU goes through perflab.flops.mfu.utilization, which never gives a figure above 100 %: the FLOPs
    (or the peak) are then wrong, and the report says so."""
    folder = write_job(tmp_path / "job", [rank_trace(r, 2) for r in range(2)])
    rep = jt.audit_traces(folder, flops_per_step=1e20)
    assert rep.mfu is not None and rep.mfu.mfu is None and rep.mfu.peak_tflops and rep.mfu.suspect
    assert "MFU: not shown: " in rep.summary()


def test_an_unknown_gpu_gets_no_peak(tmp_path):
    folder = write_job(tmp_path / "job", [rank_trace(r, 2, device="NVIDIA A10G") for r in range(2)])
    m = jt.audit_traces(folder, flops_per_step=4e12).mfu
    assert m is not None and m.mfu is None and m.peak_tflops is None and "peak unknown" in m.peak_source


def test_a_cpu_trace_has_shares_but_no_idle_split():
    rep = jt.audit_traces(CPU_TRACE)
    r = rep.ranks[0]
    assert not rep.on_gpu and r.idle_split is None
    assert sum(r.shares.values()) == pytest.approx(1.0) and r.shares["compute"] > 0


def test_gzip_and_pt_trace_names_are_read(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    for r in range(2):
        (folder / f"host_{r}.1.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(rank_trace(r, 2)).encode()))
    assert jt.audit_traces(folder).ranks_found == 2


# ------------------------------------------------------------------------------- bad input: one line
@pytest.mark.parametrize("make, words", [
    (lambda d: None, "no trace in folder"),
    (lambda d: write_job(d, [rank_trace(0, 2), rank_trace(1, 4)]), "different jobs"),
    (lambda d: write_job(d, [rank_trace(0, 2), rank_trace(1, 2, t0=1_600_000_000_000_000.0)]), "different jobs"),
    (lambda d: write_job(d, [rank_trace(0, 2), rank_trace(1, 2, steps=(4, 5, 6))]), "different steps"),
    (lambda d: write_job(d, [rank_trace(0, 2), rank_trace(0, 2)]), "rank 0 has two traces"),
    (lambda d: write_job(d, [rank_trace(0, 2), rank_trace(3, 2)]), "different jobs"),
    (lambda d: write_job(d, [{**rank_trace(0, 2), "distributedInfo": {}}, rank_trace(1, 2)]), "no distributedInfo"),
    (lambda d: write_job(d, [{**rank_trace(0, 1), "traceEvents": [e for e in rank_trace(0, 1)["traceEvents"]
                                                                   if "ProfilerStep" not in e["name"]]}]),
     "no ProfilerStep"),
])
def test_bad_folders_get_one_line(tmp_path, make, words):
    folder = tmp_path / "job"
    folder.mkdir()
    make(folder)
    with pytest.raises(InputError) as e:
        jt.audit_traces(folder)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_broken_file_names_itself(tmp_path):
    folder = write_job(tmp_path / "job", [rank_trace(0, 2)])
    shutil.copy(PUBLIC / "hta_sampled_job" / "sampled_rank-0.json.gz", folder / "x.json")
    (folder / "y.json").write_text("{not json")
    with pytest.raises(InputError, match="y.json"):
        jt.audit_traces(folder)


# ------------------------------------------------------------------------------- a real gloo job with a planted straggler
GLOO_JOB = Path(__file__).resolve().parents[2] / "corpus" / "traces" / "gloo_job"


def test_the_planted_straggler_of_a_real_gloo_job_is_named_with_the_wait_it_costs():
    """tests/corpus/make_job_traces.py: 4 gloo ranks average gradients with all_reduce; rank 3 does extra
    matrix products every step, so the others wait for it in every all-reduce."""
    rep = jt.audit_traces(GLOO_JOB)
    assert rep.world_size == 4 and rep.ranks_found == 4 and not rep.on_gpu
    st = rep.stragglers
    assert st.ranks == [3] and 3 in st.by_compute
    c = rep.collectives
    # every step averages the 4 parameter tensors (2 weights, 2 biases) with one all-reduce each
    assert c.matched == 4 * len(rep.steps) and c.unmatched == 0
    held = c.held_up_others_s
    assert held[3] > sum(held[r] for r in (0, 1, 2))
    for r in rep.ranks:
        assert r.idle_split is None and sum(r.shares.values()) == pytest.approx(1.0)
        assert r.shares["communication"] > 0


# ------------------------------------------------------------------------------- forged traces
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ODD = [None, "x", -1, -1e9, 0, 1e30, float("nan"), float("inf"), [], {}, True, "ProfilerStep#2", "ncclKernel_x"]
FIELDS = ["ts", "dur", "name", "cat", "ph", "tid", "args", "stream", "correlation"]


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 40), st.sampled_from(FIELDS), st.sampled_from(ODD)),
                min_size=1, max_size=6),
       st.sampled_from([None, {}, {"rank": "a"}, {"rank": 5, "world_size": 2}, {"rank": 1, "world_size": -3}]))
def test_forged_traces_give_a_report_or_one_line(edits, dist):
    import math
    import tempfile

    traces = [rank_trace(r, 2) for r in range(2)]
    if dist is not None:
        traces[1]["distributedInfo"] = dist
    for r, i, key, value in edits:
        e = traces[r]["traceEvents"][i % len(traces[r]["traceEvents"])]
        if key in ("stream", "correlation"):
            e.setdefault("args", {})
            if isinstance(e["args"], dict):
                e["args"][key] = value
        else:
            e[key] = value
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        for r, t in enumerate(traces):
            (folder / f"r{r}.json").write_text(json.dumps(t))
        try:
            rep = jt.audit_traces(folder, flops_per_step=1e12)
        except InputError as e:
            assert "\n" not in str(e)
            return
    assert rep.summary() and json.dumps(rep.to_json())
    for row in rep.ranks:
        assert all(v is None or (math.isfinite(v) and -1e-9 <= v <= 1 + 1e-9) for v in row.shares.values())


@settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10_000), st.sampled_from(FIELDS), st.sampled_from(ODD)),
                min_size=1, max_size=8))
def test_forged_cpu_job_traces_give_a_report_or_one_line(edits):
    import tempfile

    traces = [json.loads(gzip.decompress(f.read_bytes())) for f in sorted(GLOO_JOB.iterdir())]
    for r, i, key, value in edits:
        e = traces[r]["traceEvents"][i % len(traces[r]["traceEvents"])]
        if key in ("stream", "correlation"):
            if isinstance(e.get("args"), dict):
                e["args"][key] = value
        else:
            e[key] = value
    with tempfile.TemporaryDirectory() as d:
        for r, t in enumerate(traces):
            (Path(d) / f"r{r}.json").write_text(json.dumps(t))
        try:
            rep = jt.audit_traces(d)
        except InputError as e:
            assert "\n" not in str(e)
            return
    assert rep.summary() and json.dumps(rep.to_json())
