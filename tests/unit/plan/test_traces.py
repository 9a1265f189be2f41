"""Tests of `perflab.plan.traces`: the job traces lesson 15 reads ship with the package, each with its source."""

from __future__ import annotations

import hashlib
import json

import pytest

from perflab.core.errors import InputError
from perflab.plan.traces import NAMES, ROOT, job_folder


def test_every_shipped_trace_has_its_source_and_checksum():
    sources = json.loads((ROOT / "SOURCES.json").read_text())["traces"]
    shipped = {str(p.relative_to(ROOT)) for name in NAMES for p in job_folder(name).iterdir()}
    assert shipped == set(sources)
    for rel, src in sources.items():
        assert "commit" in src or "made_by" in src, rel
        if "sha256" in src:
            assert hashlib.sha256((ROOT / rel).read_bytes()).hexdigest() == src["sha256"], rel


def test_an_unknown_job_is_one_line():
    with pytest.raises(InputError, match="no shipped job 'nope': use one of hta_sampled_job, gloo_job"):
        job_folder("nope")
