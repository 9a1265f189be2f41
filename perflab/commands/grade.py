"""`perflab grade`: run a class's lab notebooks in fresh kernels, grade each learner's answers in a
judge process apart from them (perflab/classroom/judge.py), and write one gradebook.

    perflab grade SUBMISSIONS [--labs 01,07] [--timeout S] [--jobs N] [--csv FILE] [--json] [--no-sandbox]

Each learner's processes run confined by bubblewrap (perflab/classroom/sandbox.py); where it is not
installed (or cannot run), grading stops in one line unless `--no-sandbox` is given, and then every
report says that the grades are not isolated.
"""

from __future__ import annotations

import sys

from perflab.commands._args import emit, positive_float, positive_int


def register(sub) -> None:
    p = sub.add_parser("grade", help="grade a folder of submitted labs (one folder per learner): done, not done, "
                                     "wrong, error or timeout for each, as a CSV/JSON gradebook and a summary")
    p.add_argument("folder", metavar="DIR", help="the submissions: one folder per learner, holding NN_lab.ipynb files")
    p.add_argument("--labs", help="only these labs, by number or name: 01,07,shuffle (default: every lab)")
    p.add_argument("--timeout", type=positive_float, default=300.0, help="seconds per notebook (default 300)")
    p.add_argument("--jobs", type=positive_int, help="notebooks at a time, at most one per core (default: half the cores)")
    p.add_argument("--memory", type=positive_float, metavar="GB",
                   help="memory each kernel may use, in GiB (default: its share of the RAM, 2 to 8 GiB)")
    p.add_argument("--csv", metavar="FILE", help="write the gradebook as CSV (one row per learner and lab)")
    p.add_argument("--course", metavar="LABS", help="the course's labs folder (default: labs/ here or beside perflab)")
    p.add_argument("--json", action="store_true", help="print the gradebook as JSON (predictions included)")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run the learners' code unconfined where bubblewrap is not available (the reports then say "
                        "that the grades are not isolated: a learner's code could change another's grade)")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.classroom import gradebook as G
    from perflab.classroom.sandbox import protect

    protect()  # the learners' processes run as this user: keep them out of this one's memory and pipes
    stop_on_sigterm()

    limits = G.Limits(memory_bytes=int(args.memory * 2**30)) if args.memory else None
    labs = [x for x in (args.labs or "").split(",") if x.strip()] or None
    jobs_asked = args.jobs
    if jobs_asked and jobs_asked > G.usable_cores():
        sys.stderr.write(f"perflab grade: {jobs_asked} jobs asked, {G.usable_cores()} cores here: "
                         f"running {G.usable_cores()} at a time\n")

    def progress(rec: G.Record) -> None:
        if not args.json:
            sys.stderr.write(G.clean(f"  {rec.learner} · {rec.lab}: {rec.outcome} ({rec.seconds:.0f} s)") + "\n")

    book = G.grade_folder(args.folder, labs=labs, course=args.course, timeout=args.timeout, jobs=jobs_asked,
                          limits=limits, on_record=progress, isolate=not args.no_sandbox)
    if args.csv:
        book.write_csv(args.csv)
    text = book.summary() + (f"\n\nGradebook written to {args.csv}" if args.csv else "")
    emit(book.as_dict(), args.json, text)
    return 0


def stop_on_sigterm() -> None:
    """A plain `kill` ends the grading as Ctrl-C does: the learners' boxes (tmpfs mounts), control
    groups and bytecode cache are removed on the way out, not left behind in /tmp."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set a handler (a test calling run() from a thread)

    def stop(_signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
