"""No citation a reader cannot open: "seed" is never used as a source in the course.

Every fact the course states cites its public source (title, author or project, URL, section or
table). This test fails on any use of "seed" in notebooks, labs and perflab (code, docstrings,
comments, data files) that is not about random numbers (`manual_seed`, `seed=`, "random seed",
"the same seed", ...).

Lessons and labs 06-10 and their packages cite sources a reader can open, never an internal one.

`seed` as a random-number argument is fine; "the seed's ...", "seeds/004", "course seed 002" are not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


SCANNED = ("notebooks", "labs", "perflab", "data")


SUFFIXES = {".py", ".ipynb", ".json", ".csv", ".md", ".yaml", ".yml", ".txt", ".toml"}


WORD = re.compile(r"\bseeds?\b|seeds?/\d|seed_(?!\w*rng)", re.IGNORECASE)


# the word about random numbers, within a few characters of the match
RNG = re.compile(
    r"manual_seed|random|rng|generator|same seed|one seed|from the seed's x_0|derived from the seed|"
    r"seed\s*(=|:|\)|\*|\+|,|\]|is not None)|self\.seed|`seed`|seeds the|sets no seeds|SEED\s*=|, seed in|"
    r"\.seed\(|np\.random|initial weights|seeded|seed \(an? |per seed|seed value|rank seed|--seed|\"seed\"|"
    r"seed \{|seed \(default",
    re.IGNORECASE)


# Files that may still cite "the seed" (none: every citation names its public source). A file
# named here must still need it (the next test).
ALLOWED: set[str] = set()


def _texts(path: Path) -> list[str]:
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text(encoding="utf-8"))
        return ["".join(c.get("source", "")) for c in nb.get("cells", [])]
    return [path.read_text(encoding="utf-8", errors="replace")]


def seed_citations(text: str) -> list[str]:
    """Each line of `text` that uses "seed" other than for random numbers."""
    out = []
    for line in text.splitlines():
        for m in WORD.finditer(line):
            window = line[max(0, m.start() - 40): m.end() + 40]
            if not RNG.search(window):
                out.append(line.strip())
                break
    return out


def offenders() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for top in SCANNED:
        base = ROOT / top
        if not base.exists():
            continue
        for path in sorted(base.rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file() or "__pycache__" in path.parts:
                continue
            hits = [h for t in _texts(path) for h in seed_citations(t)]
            if hits:
                found[path.relative_to(ROOT).as_posix()] = hits
    return found


def test_the_detector_tells_citations_from_random_seeds():
    cited = ["as the seed's Llama code did", "(seeds/004, section 2)", "course seed 002",
             "restated in the course's seed chapter", "The seed puts it as: ...", "def seed_tflops_estimate(...)"]
    rng = ["torch.manual_seed(0)", "build_model(cfg, seed=3)", "a random seed per rank", "Same seed, same data",
           "`seed` makes the initial weights reproducible", "it sets no seeds, threads or global flags"]
    assert all(seed_citations(t) for t in cited), [t for t in cited if not seed_citations(t)]
    assert not any(seed_citations(t) for t in rng), [t for t in rng if seed_citations(t)]


def test_no_seed_is_cited_anywhere_in_the_course():
    found = offenders()
    new = {k: v[:3] for k, v in found.items() if k not in ALLOWED}
    assert not new, f"cite the public source instead (title, author or project, URL, section): {new}"


def test_the_allow_list_names_only_files_that_still_need_it():
    found = offenders()
    stale = sorted(p for p in ALLOWED if p not in found)
    assert not stale, f"these files no longer cite the seed: remove them from ALLOWED: {stale}"


CITATION = re.compile(r"\bthe seed(?:'s|s)?\b(?! (?:of|for|value|argument)\b)|\bseeds/\d|\bcourse seed\b|\bseed \d{3}\b",
                      re.IGNORECASE)


# every file is checked (none is skipped)
SKIP: set[str] = set()


def _files():
    for pat in ("notebooks/0[6-9]_*.ipynb", "notebooks/10_*.ipynb", "labs/0[6-9]_*.ipynb", "labs/10_*.ipynb",
                "labs/solutions/0[6-9]_*.ipynb", "labs/solutions/10_*.ipynb"):
        yield from ROOT.glob(pat)
    for pkg in ("distributed", "dataloading", "numa", "profiling", "compiler"):
        for p in (ROOT / "perflab" / pkg).rglob("*"):
            if p.suffix in {".py", ".json", ".md", ".txt"}:
                yield p


def test_no_internal_source_is_cited():
    bad = []
    for p in _files():
        rel = p.relative_to(ROOT).as_posix()
        if rel in SKIP:
            continue
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if CITATION.search(line):
                bad.append(f"{rel}:{i}: {line.strip()[:120]}")
    assert not bad, "cite the public source instead:\n" + "\n".join(bad)


def test_the_pattern_tells_a_citation_from_an_rng_seed():
    assert CITATION.search("as the seed's Llama code did") and CITATION.search("(seeds/004, section 1)")
    assert CITATION.search("course seed 002")
    assert not CITATION.search("torch.manual_seed(0); same seed and data") and not CITATION.search("seed: int = 0")
