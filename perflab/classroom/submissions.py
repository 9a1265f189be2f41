"""The course's labs and a class's submissions, found and read before any learner's code runs.

    labs = course_labs("labs/")                       # number -> Lab, with the checks it calls
    subs, notes = find_submissions("submissions/", pick_labs(labs, ["01", "07"]), labs)
    snapshot(subs, "submissions/")                    # every notebook's bytes, read once

Submissions: one folder per learner (`alice/01_flops.ipynb`, as an LMS export gives them, nested
folders allowed). A notebook is matched to a course lab by its number (`01_…`, `lab1.ipynb`,
`alice_01_flops_v2.ipynb`) or, without a number, by the lab's name (`flops.ipynb`); what cannot be
matched is said in one line each. A symbolic link, anything but a regular file, a notebook over
16 MiB is refused when it is read (`snapshot`). A learner's folder is walked without recursion and
without following links, at most `MAX_DEPTH` folders deep (a deeper one is said in one line).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perflab.classroom.shown import visible
from perflab.core.errors import InputError

LAB_GLOB = "[0-9][0-9]*_*.ipynb"  # 01_flops.ipynb, 04b_tile_config.ipynb
MAX_DEPTH = 32  # folders below a learner's own: an LMS export nests a few
CHECK_CALL = re.compile(r"^\s*(?:\w+\s*=\s*)?lab\.(check\w*)\(", re.M)
PREDICT_CALL = re.compile(r"\bpredict\.ask\b")


@dataclass(frozen=True)
class Lab:
    number: str  # '01'
    name: str  # '01_flops'
    path: Path
    checks: tuple[str, ...]  # the check calls of the shipped lab, each must still be there
    predicts: bool = False  # whether the shipped lab asks for predictions (course.predict): only then are they recorded

    @property
    def topic(self) -> str:
        return self.name.split("_", 1)[1] if "_" in self.name else self.name


def default_labs_dir() -> Path | None:
    """The course's labs/: in the working directory, else beside the perflab package (a checkout)."""
    import perflab

    for cand in (Path.cwd() / "labs", Path(perflab.__file__).resolve().parents[1] / "labs"):
        if cand.is_dir() and any(cand.glob(LAB_GLOB)):
            return cand
    return None


def course_labs(labs_dir: Path | str | None = None) -> dict[str, Lab]:
    """Every lab of the course by number, with the check calls the shipped notebook makes."""
    folder = Path(labs_dir) if labs_dir is not None else default_labs_dir()
    if folder is None or not folder.is_dir():
        raise InputError(f"no course labs at {folder or 'labs/'}: pass --course PATH/TO/labs (the folder with 01_flops.ipynb …)")
    labs = {}
    for path in sorted(folder.glob(LAB_GLOB)):
        try:
            nb = json.loads(path.read_text())
            code = "\n".join("".join(c.get("source", "")) for c in nb.get("cells", []) if c.get("cell_type") == "code")
        except (OSError, ValueError):
            code = ""
        number = path.stem.split("_", 1)[0]
        labs[number] = Lab(number, path.stem, path, tuple(dict.fromkeys(CHECK_CALL.findall(code))),
                           bool(PREDICT_CALL.search(code)))
    if not labs:
        raise InputError(f"no lab notebooks (NN_name.ipynb) in {folder}: pass --course PATH/TO/labs")
    return labs


def pick_labs(labs: dict[str, Lab], only: Sequence[str] | None) -> dict[str, Lab]:
    """`--labs 01,7,flops` → those labs; an unknown one is an error that lists the course's labs."""
    if not only:
        return labs
    chosen: dict[str, Lab] = {}
    for item in only:
        item = str(item).strip()
        if not item:
            continue
        lab = match_lab(item, labs)
        if lab is None:
            raise InputError(f"no lab {item!r} in this course: choose from {', '.join(labs)}")
        chosen[lab.number] = lab
    return chosen


def match_lab(name: str, labs: dict[str, Lab]) -> Lab | None:
    """The lab a file name means: by its first number (01, 1, lab7, 04b), else by a lab's name in it."""
    stem = Path(name).stem.lower()
    num = re.search(r"(?<![0-9])([0-9]{1,2})(?![0-9])([a-z]?)", stem)
    if num:
        key = f"{int(num.group(1)):02d}"
        if num.group(2) and key + num.group(2) in labs:  # 04b_tile_config
            return labs[key + num.group(2)]
        return labs.get(key)
    words = re.sub(r"[^a-z0-9]+", "_", stem)
    hits = [lab for lab in labs.values() if lab.topic.lower() in words]
    return hits[0] if len(hits) == 1 else None


# ----------------------------------------------------------------------------- submissions
@dataclass
class Submission:
    learner: str
    lab: Lab
    path: Path
    data: bytes | None = None  # its bytes, read before any learner's code runs (snapshot)
    refused: str = ""  # why it is not graded (a link, not a regular file, too large)


def snapshot(subs: Sequence[Submission], root: Path | str) -> None:
    """Read every submission's bytes now, before the first kernel starts: the kernels and the judge
    get copies of these, so no learner's code can change what is graded (its own or another's).
    A symbolic link anywhere below `root`, or anything but a regular file, is refused."""
    from perflab.classroom.answer_source import MAX_NOTEBOOK_BYTES

    top = Path(os.path.abspath(root))
    for sub in subs:
        path = Path(os.path.abspath(sub.path))
        try:
            parts = path.relative_to(top).parts
        except ValueError:
            parts = ()
        links = [top.joinpath(*parts[:i + 1]) for i in range(len(parts)) if top.joinpath(*parts[:i + 1]).is_symlink()]
        if links:
            sub.refused = f"{links[0].relative_to(top)} is a symbolic link: hand in the notebook itself"
            continue
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        except OSError as e:
            sub.refused = f"cannot read the notebook ({e.strerror})"
            continue
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                sub.refused = "not a regular file: hand in the notebook itself"
            elif info.st_size > MAX_NOTEBOOK_BYTES:
                sub.refused = (f"malformed notebook (it is {info.st_size / 2**20:.1f} MiB, over the "
                               f"{MAX_NOTEBOOK_BYTES // 2**20} MiB a lab may be: clear its outputs)")
            else:
                with os.fdopen(fd, "rb", closefd=False) as f:
                    sub.data = f.read(MAX_NOTEBOOK_BYTES + 1)
                if len(sub.data) > MAX_NOTEBOOK_BYTES:
                    sub.data, sub.refused = None, "malformed notebook (over the size a lab may be)"
        finally:
            os.close(fd)


def find_submissions(root: Path | str, labs: dict[str, Lab], course: dict[str, Lab] | None = None
                     ) -> tuple[list[Submission], list[str]]:
    """Submissions under `root` (one folder per learner) for `labs`; and one line per notebook
    that could not be matched (or that was left out, being an older copy of the same lab)."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root} is not a folder: give the folder that holds one folder per learner")
    course = course or labs
    subs: list[Submission] = []
    notes: list[str] = []
    for item in sorted(root.iterdir()):
        if item.name.startswith("."):
            continue
        if item.is_file():
            if item.suffix == ".ipynb":
                notes.append(f"{visible(item.name)}: not in a learner's folder; put it in a folder named after the learner")
            continue
        found: dict[str, list[Path]] = {}
        notebooks, deep = _notebooks_in(item)
        if deep:
            notes.append(f"{visible(item.name)}: folders more than {MAX_DEPTH} deep, not searched")
        for nb in notebooks:
            lab = match_lab(nb.name, course)
            if lab is None:
                num = re.search(r"(?<![0-9])([0-9]{1,2})(?![0-9])", nb.stem)
                why = (f"no lab {int(num.group(1)):02d} in this course (its labs: {', '.join(course)})" if num else
                       f"no lab number or lab name in the file name (name it like {next(iter(course.values())).name}.ipynb)")
                notes.append(f"{visible(item.name)}/{visible(str(nb.relative_to(item)))}: {why}")
            elif lab.number in labs:
                found.setdefault(lab.number, []).append(nb)
        for number, paths in found.items():
            paths.sort(key=_mtime)
            if len(paths) > 1:
                notes.append(f"{visible(item.name)}: {len(paths)} notebooks for lab {number}; graded the newest, "
                             f"{visible(str(paths[-1].relative_to(item)))}")
            subs.append(Submission(item.name, labs[number], paths[-1]))
    return subs, notes



def _mtime(path: Path) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def _notebooks_in(folder: Path) -> tuple[list[Path], bool]:
    """Every `.ipynb` below `folder` (a link named so included: `snapshot` refuses it), hidden
    entries left out, walked without recursion and without following a link to a folder; and
    whether a folder deeper than MAX_DEPTH was left unsearched."""
    out: list[Path] = []
    deep = False
    todo = [(folder, 0)]
    while todo:
        here, depth = todo.pop()
        try:
            with os.scandir(here) as it:
                entries = sorted(((e.name, e.is_dir(follow_symlinks=False)) for e in it), reverse=True)
        except OSError:
            continue
        for name, is_dir in entries:
            if name.startswith("."):
                continue  # .ipynb_checkpoints and other hidden copies
            if is_dir and name.endswith(".ipynb"):
                out.append(here / name)  # a folder named as a notebook: `snapshot` refuses it
            if is_dir:
                if depth + 1 > MAX_DEPTH:
                    deep = True
                else:
                    todo.append((here / name, depth + 1))
            elif name.endswith(".ipynb"):
                out.append(here / name)
    return sorted(out), deep
