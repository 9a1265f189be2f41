"""Tests of `perflab.classroom.release`."""

from __future__ import annotations

import pytest

from perflab.core.errors import InputError
from tests.unit.course.helpers import _notebook


# ----------------------------------------------------------------------------- the release
def test_a_release_needs_a_checkout_with_labs_and_notebooks(tmp_path, monkeypatch):
    import perflab
    from perflab.classroom import release

    monkeypatch.setattr(perflab, "__file__", str(tmp_path / "site" / "perflab" / "__init__.py"))
    root = (tmp_path / "site").resolve()
    with pytest.raises(InputError, match=rf"^{root} has no labs/ and notebooks/: build the release from a checkout"):
        release.course_root()


def test_the_release_leaves_out_egg_info_and_solutions(tmp_path):
    from perflab.classroom import release

    src = tmp_path / "course"
    (src / "perflab" / "perflab.egg-info").mkdir(parents=True)
    (src / "perflab" / "perflab.egg-info" / "PKG-INFO").write_text("Name: perflab\n")
    (src / "perflab" / "__init__.py").write_text("")
    (src / "notebooks").mkdir()
    _notebook(src / "labs" / "01_flops.ipynb")
    _notebook(src / "labs" / "solutions" / "01_flops.ipynb")
    dest, _zip = release.build_release(tmp_path / "out", src)
    files = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert files == ["labs/01_flops.ipynb", "perflab/__init__.py"]


def test_solution_search_skips_files_that_do_not_parse(tmp_path):
    from perflab.classroom import release

    (tmp_path / "broken.py").write_text("def broken(:\n    return 2 * x\n")
    (tmp_path / "good.py").write_text("def double(x):\n    return 2 * x\n")
    found = release.solution_code_in(tmp_path, {"return 2 * x": "01_flops.ipynb: double"})
    assert found == ["good.py: return 2 * x (from 01_flops.ipynb: double)"]


def test_release_refuses_to_write_into_the_course_or_over_other_files(tmp_path):
    from perflab.classroom import release

    root = tmp_path / "course"
    for d in ("labs", "notebooks", "perflab"):
        (root / d).mkdir(parents=True)
    with pytest.raises(InputError, match="is inside the course's own folders"):
        release.build_release(root / "labs" / "out", root)
    (tmp_path / "out" / release.NAME).mkdir(parents=True)
    with pytest.raises(InputError, match="exists and is not an earlier release: remove it or choose another OUT"):
        release.build_release(tmp_path / "out", root)


def test_release_reads_cells_with_magics_and_gives_up_on_broken_code():
    from perflab.classroom import release

    tree = release._parse("%matplotlib inline\n!pip list\nx = lab.check_flops(1)\n")
    assert tree is not None and "check_flops" in __import__("ast").dump(tree)
    assert release._parse("def broken(:\n") is None
