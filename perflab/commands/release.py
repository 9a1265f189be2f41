"""`perflab release OUT`: the course for learners, without the labs' solutions, outputs cleared.

    perflab release OUT      # OUT/perflab-course/ and OUT/perflab-course.zip
"""

from __future__ import annotations

from perflab.commands._args import emit


def register(sub) -> None:
    p = sub.add_parser("release", help="build the learners' copy of the course: no labs/solutions/, no outputs; "
                                       "a folder and a zip")
    p.add_argument("out", metavar="OUT", help="where to write perflab-course/ and perflab-course.zip")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from perflab.classroom import release as R

    folder, zpath = R.build_release(args.out)
    files = sum(1 for p in folder.rglob("*") if p.is_file())
    labs = sorted(p.name for p in (folder / "labs").glob("*.ipynb"))
    info = {"folder": str(folder), "zip": str(zpath), "files": files, "zip_bytes": zpath.stat().st_size, "labs": labs}
    emit(info, args.json, f"wrote {folder} ({files} files, {len(labs)} labs, no solutions, outputs cleared)\n"
                          f"and {zpath} ({zpath.stat().st_size / 2**20:.1f} MiB)")
    return 0
