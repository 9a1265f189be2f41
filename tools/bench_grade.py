"""Time `perflab grade` on a class: N learners × one lab (the lab's solution, as each learner's
submission), graded with the perflab that this Python imports. A benchmark, not a test.

    python tools/bench_grade.py [--learners 30] [--lab 07] [--jobs 2] [--course labs]

To compare with an older perflab, run the same command with PYTHONPATH pointing at a checkout of
it (its kernels inherit PYTHONPATH too); the two figures are only comparable on the same machine
under the same load.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--learners", type=int, default=30)
    ap.add_argument("--lab", default="07")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--course", default=str(Path(__file__).resolve().parents[1] / "labs"))
    args = ap.parse_args()

    import perflab
    from perflab.classroom import gradebook as gb

    course = Path(args.course)
    lab = gb.pick_labs(gb.course_labs(course), [args.lab])
    (number, info), = lab.items()
    answer = course / "solutions" / f"{info.name}.ipynb"
    with tempfile.TemporaryDirectory(prefix="perflab-bench-") as tmp:
        subs = Path(tmp) / "submissions"
        for i in range(args.learners):
            (subs / f"learner{i:02d}").mkdir(parents=True)
            shutil.copy(answer, subs / f"learner{i:02d}" / f"{info.name}.ipynb")
        t0 = time.perf_counter()
        book = gb.grade_folder(subs, labs=[number], course=course, timeout=args.timeout, jobs=args.jobs)
        wall = time.perf_counter() - t0
    outcomes: dict[str, int] = {}
    for r in book.records:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    print(json.dumps({"perflab": str(Path(perflab.__file__).parent), "lab": info.name, "learners": args.learners,
                      "jobs": book.jobs, "wall_s": round(wall, 1),
                      "per_notebook_s": round(sum(r.seconds for r in book.records) / max(1, len(book.records)), 1),
                      "outcomes": outcomes}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
