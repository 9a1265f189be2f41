"""The job traces lesson 15 reads, shipped with the package: a learner's copy of the course (`perflab
release`) has no tests/ folder, so the lesson's traces live in perflab/plan/data/traces/, each with its
source in SOURCES.json there.

* `hta_sampled_job`: two ranks of a 128-rank NCCL training job, copied unchanged from HolisticTraceAnalysis'
  repository (its tests/data/trace_filter, MIT licence);
* `gloo_job`: four gloo ranks of a small data-parallel job with a planted straggler (rank 3 does extra
  matrix products every step), written by tests/corpus/make_job_traces.py with plain torch.distributed
  and torch.profiler.
"""

from __future__ import annotations

from pathlib import Path

from perflab.core.errors import InputError

ROOT = Path(__file__).with_name("data") / "traces"
NAMES = ("hta_sampled_job", "gloo_job")


def job_folder(name: str) -> Path:
    """The folder of one shipped job's traces (what `perflab audit --trace` reads)."""
    if name not in NAMES:
        raise InputError(f"no shipped job {name!r}: use one of {', '.join(NAMES)}")
    return ROOT / name
