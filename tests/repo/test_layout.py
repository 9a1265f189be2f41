"""The tests mirror the package: a module's tests are found by its name (README, "Tests")."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
PKG = ROOT / "perflab"


def _files(sub: str) -> list[Path]:
    return sorted((TESTS / sub).rglob("test_*.py"))


def test_every_unit_test_file_names_a_module_of_the_package():
    orphans = []
    for f in _files("unit"):
        rel = f.relative_to(TESTS / "unit")
        stem = rel.stem[len("test_"):]
        where = PKG.joinpath(*rel.parts[:-1])
        if not ((where / f"{stem}.py").exists() or (stem == "init" and (where / "__init__.py").exists())):
            orphans.append(str(f.relative_to(ROOT)))
    assert not orphans, f"test files that mirror no module of perflab/: {orphans}"


def test_every_lab_and_command_test_file_names_a_lab_or_a_command():
    labs = {m.group(1) for p in (ROOT / "labs").glob("*.ipynb") if (m := re.match(r"(\d+b?)_", p.name))}
    bad = [f.name for f in _files("labs") if f.stem[len("test_lab"):] not in labs]
    commands = {p.stem for p in (PKG / "commands").glob("*.py")} | {"main"}
    bad += [f.name for f in _files("cli") if f.stem[len("test_"):] not in commands and f.stem != "test_args"]
    assert not bad, bad


def test_no_test_file_is_named_after_how_it_was_written():
    loose = [p.name for p in TESTS.glob("test_*.py")]
    assert not loose, f"test files outside unit/, labs/, cli/, notebooks/ and repo/: {loose}"
    assert not [p for p in TESTS.rglob("test_cov*.py")], "a test file named after a coverage pass"
