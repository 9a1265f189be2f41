"""The claims ledgers (`notebooks/claims/NN.json`) stay whole.

Every lesson that has a ledger lists each claim that is a number or a rule: its words, the cell it
stands in, and its proof, either a test id or a public source. These tests check that

* every proof exists: a test id names a test file and a test function (or class method) defined in
  it; a source has a title, an https URL and a section;
* every claim stands where the ledger says: the cell exists and holds the claim's numbers and most
  of its words;
* the lesson's markdown states no number with a unit that its ledger does not list for that cell
  (numbers the notebook computes appear in code output, never in markdown, so they are not scanned).
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = ROOT / "notebooks" / "claims"
LEDGERS = sorted(CLAIMS.glob("[0-9][0-9].json"))

# a number (1, 1.5, 50,257, ~25, ±3) and a unit; "×" only as a factor (not "128×64"), "B" only spaced
_NUM = r"(?<![\w.^/])[~±]?(?P<num>\d+(?:,\d{3})*(?:\.\d+)?)"
_UNITS = (r"%|‰|ms|µs|us|ns|s|min|h|GHz|MHz|W|"
          r"GB/s|Gb/s|MB/s|TB/s|GiB/s|TFLOP/s|GFLOP/s|PFLOP/s|FLOP/s|TFLOPS|GFLOPS|"
          r"TiB|GiB|MiB|KiB|TB|GB|MB|kB|KB|bytes|byte|bits|bit")
UNIT_RE = re.compile(_NUM + r"(?:\s?(?P<unit>" + _UNITS + r")(?![\w/])|(?P<times>\s?[×x])(?![\w\d(]|\s?\d)|"
                     r"\s(?P<b>B)(?![\w/]))")


_RANGE_RE = re.compile(r"(?<![\w.^/])[~±]?(\d+(?:,\d{3})*(?:\.\d+)?)\s?(?:to|–|-|and|or)\s?$")


def mentions(text: str) -> list[str]:
    """The numbers with units that `text` states, as written ('67.0 GiB', '28 %', '16×'); the first
    number of a range takes the unit of the second ('82.4 to 67.0 GiB' gives '82.4 GiB' too)."""
    out = []
    for m in UNIT_RE.finditer(text):
        first = _RANGE_RE.search(text[max(0, m.start() - 40):m.start()])
        if first:
            out.append(first.group(1) + m.group(0).strip()[len(m.group("num")) + (m.group(0).strip()[0] in "~±"):])
        out.append(m.group(0).strip())
    return out


def _number(mention: str) -> str:
    return UNIT_RE.match(mention).group("num")


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[*`_\\]", "", text)).strip().lower()


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z0-9]+", _norm(text)) if len(w) > 3 or w.isdigit()]


def _has_number(text: str, num: str) -> bool:
    return re.search(r"(?<![\d.,])" + re.escape(num) + r"(?![\d]|[.,]\d)", text) is not None


@functools.cache
def _notebook(name: str) -> list[dict]:
    return json.loads((ROOT / "notebooks" / name).read_text())["cells"]


@functools.cache
def _defined_tests(path: str) -> frozenset[str]:
    tree = ast.parse((ROOT / path).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.update(f"{node.name}::{f.name}" for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return frozenset(names)


def _ledger(path: Path) -> dict:
    return json.loads(path.read_text())


def _src(cell: dict) -> str:
    return "".join(cell["source"])


# Numbers a lesson states that its ledger does not list yet, named so the debt is visible and checked
# both ways (a new unlisted number fails; an entry whose number is gone or now proved fails): lesson
# 00's recorded denormal slowdowns, whose sentences are being rewritten apart from its ledger.
OWED: dict[str, set[str]] = {}  # lesson -> numbers it states that its ledger does not prove yet (none)


def test_every_lesson_has_a_ledger():
    lessons = {p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    have = {p.stem for p in LEDGERS}
    assert lessons and not (lessons - have), f"lessons without a ledger: {sorted(lessons - have)}"


@pytest.mark.parametrize("path", LEDGERS, ids=lambda p: p.name)
def test_ledger_format_and_proofs(path):
    led = _ledger(path)
    assert led["lesson"].startswith(path.stem + "_") and (ROOT / "notebooks" / led["lesson"]).exists(), led["lesson"]
    assert led["claims"], f"{path.name} lists no claims"
    for c in led["claims"]:
        assert set(c) >= {"claim", "cell", "proof"} and c["claim"].strip(), c
        proof = c["proof"]
        assert len(proof) == 1 and set(proof) <= {"test", "source"}, c
        if "test" in proof:
            file, _, name = proof["test"].partition("::")
            assert file.startswith("tests/") and (ROOT / file).is_file(), f"{path.name}: no test file {file}"
            assert re.sub(r"\[.*\]$", "", name) in _defined_tests(file), f"{path.name}: {proof['test']} is not defined"
        else:
            src = proof["source"]
            assert src.get("title", "").strip() and src.get("section", "").strip(), f"{path.name}: {c['claim']!r}"
            assert re.match(r"https://\S+\.\S+", src.get("url", "")), f"{path.name}: {c['claim']!r} has no URL"


def stands_in(claim: str, cell_text: str) -> bool:
    """Whether a cell holds the claim: all its numbers and at least 60 % of its longer words."""
    text = _norm(cell_text)
    words = _words(claim)
    missing = [w for w in words if w not in text]
    nums = re.findall(r"\d+(?:,\d{3})*(?:\.\d+)?", claim)
    return len(missing) <= len(words) * 0.4 and all(_has_number(text, n) for n in nums)


@pytest.mark.parametrize("path", LEDGERS, ids=lambda p: p.name)
def test_claims_stand_where_the_ledger_says(path):
    led = _ledger(path)
    cells = _notebook(led["lesson"])
    wrong = []
    for c in led["claims"]:
        if c.get("printed"):  # words a code cell prints at run time, from the package: the cell must be code
            inside = isinstance(c["cell"], int) and 0 <= c["cell"] < len(cells)
            if not (inside and cells[c["cell"]]["cell_type"] == "code"):
                wrong.append(f"cell {c['cell']}: {c['claim']!r} is marked printed but the cell is not a code cell")
            continue
        ok = isinstance(c["cell"], int) and 0 <= c["cell"] < len(cells) and stands_in(c["claim"], _src(cells[c["cell"]]))
        if not ok:  # say where it moved, when cells were added or removed
            moved = [i for i, cell in enumerate(cells) if stands_in(c["claim"], _src(cell))]
            wrong.append(f"cell {c['cell']}: {c['claim']!r}" + (f" (now in cell {moved})" if moved else " (in no cell)"))
    assert not wrong, f"{path.name}: claims not where the ledger says: {wrong}"


def uncovered(cells: list[dict], claims: list[dict]) -> list[str]:
    """'cell i: mention' for every number with a unit in a markdown cell that no claim of that cell holds."""
    by_cell: dict[int, str] = {}
    for c in claims:
        by_cell[c["cell"]] = by_cell.get(c["cell"], "") + " " + c["claim"]
    return [f"cell {i}: {m}" for i, cell in enumerate(cells) if cell["cell_type"] == "markdown"
            for m in mentions(_src(cell)) if not _has_number(by_cell.get(i, ""), _number(m))]


@pytest.mark.parametrize("path", LEDGERS, ids=lambda p: p.name)
def test_markdown_states_no_number_the_ledger_lacks(path):
    led = _ledger(path)
    missing = uncovered(_notebook(led["lesson"]), led["claims"])
    owed = OWED.get(led["lesson"], set())
    assert not set(missing) - owed, f"{led['lesson']} states numbers its ledger does not prove: {sorted(set(missing) - owed)}"
    assert not owed - set(missing), f"{led['lesson']}: take {sorted(owed - set(missing))} off OWED (gone, or proved now)"


@pytest.mark.parametrize("text, found", [
    ("falls from 82.4 to 67.0 GiB, shrink by 16×, the activations", ["82.4 GiB", "67.0 GiB", "16×"]),
    ("gains 4 to 16 %, or 1e-7 to 1e-5", ["4 %", "16 %"]),
    ("a 128×64 tile of A (2 bytes each); 256×128 tiles", ["2 bytes"]),
    ("raises throughput by 28 % over 1F1B at 405B; about 20 s", ["28 %", "20 s"]),
    ("~25% faster, 1,024 ms or 3.9e-3, 2^-8 and 4 stages", ["~25%", "1,024 ms"]),
    ("50,257 values is not a multiple of 16 bytes; 32 B of shared memory", ["16 bytes", "32 B"]),
])
def test_the_scan_finds_numbers_with_units(text, found):
    assert mentions(text) == found


def test_a_claim_must_hold_its_numbers_and_words():
    cell = "Memory per GPU falls from 82.4 to 67.0 GiB going from 8 to 128 GPUs."
    assert stands_in("memory per GPU falls from 82.4 to 67.0 GiB", cell)
    assert not stands_in("memory per GPU falls from 82.4 to 61.0 GiB", cell)
    assert not stands_in("throughput rises with interleaved schedules", cell)


def test_the_scan_fails_a_lesson_that_types_a_number():
    cells = [{"cell_type": "markdown", "source": ["It runs 3.5× faster and uses 12 GiB."]},
             {"cell_type": "code", "source": ["print('12 GiB')"]}]
    claim = {"claim": "runs 3.5× faster", "cell": 0, "proof": {"test": "tests/x.py::t"}}
    assert uncovered(cells, []) == ["cell 0: 3.5×", "cell 0: 12 GiB"]
    assert uncovered(cells, [claim]) == ["cell 0: 12 GiB"]
    assert uncovered(cells, [claim, {**claim, "claim": "uses 12 GiB"}]) == []
    assert uncovered(cells, [{**claim, "cell": 1}]) == ["cell 0: 3.5×", "cell 0: 12 GiB"]  # the claim must be in its cell
