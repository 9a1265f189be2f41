"""The job audit as a typed report: its JSON's fields, the table's columns, and the terminal report read
from the report's attributes."""

import json
from pathlib import Path

from perflab.audit.hta import IDLE_KINDS, SHARES
from perflab.audit.job import JOB_FIELDS, RANK_FIELDS, render, table
from perflab.audit.trace import audit_traces

from .jobs import rank_trace, write_job

PUBLIC = Path(__file__).resolve().parents[2] / "corpus" / "traces" / "public"


def test_the_table_has_every_column_once():
    rep = audit_traces(PUBLIC / "hta_sampled_job")
    rows = table(rep)
    assert len(rows) == 2 and len(rows[0]) == 2 + len(SHARES) + len(IDLE_KINDS) + 2
    assert all(("%" in c or "ms" in c or c == "rank") for c in rows[0])
    assert [r["held others up ms/step"] for r in rows] == ["—", "—"]  # no collective matched across ranks
    assert render(rep) == rep.summary()


def test_the_report_names_stragglers_waits_and_mfu(tmp_path):
    traces = [rank_trace(r, 4, compute_us=6_000 + (3_000 if r == 2 else 0)) for r in range(4)]
    rep = audit_traces(write_job(tmp_path / "job", traces), flops_per_step=4e12, six_n_flops_per_step=3e12)
    text = render(rep)
    assert "Job audit of" in text and "4 rank(s) of 4, 3 step(s) (ProfilerStep#1–#3)" in text
    assert "Stragglers: rank 2 (compute z = " in text and "Collectives matched across ranks: 3 (0 unmatched)" in text
    assert "MFU: " in text and "% by 6N" in text and "4 GPU(s), peak 989.4 TFLOP/s" in text
    held = {r["rank"]: r["held others up ms/step"] for r in table(rep)}
    assert held == {"0": "0.00", "1": "0.00", "2": "9.00", "3": "0.00"}


def test_the_json_has_exactly_the_stable_fields(tmp_path):
    rep = audit_traces(write_job(tmp_path / "job", [rank_trace(r, 2) for r in range(2)]), flops_per_step=4e12)
    j = rep.to_json()
    assert tuple(j) == JOB_FIELDS and all(tuple(r) == RANK_FIELDS for r in j["ranks"])
    assert json.loads(json.dumps(j)) == j and rep.json == j
    assert list(j["ranks"][0]["step_s"]) == ["1", "2", "3"]  # step numbers as JSON keys
    assert "per_step" not in j["ranks"][0] and "suspect" not in j["mfu"]
