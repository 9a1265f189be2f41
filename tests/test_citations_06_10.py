"""Lessons and labs 06-10 and their packages cite sources a reader can open, never an internal one.

`seed` as a random-number argument is fine; "the seed's ...", "seeds/004", "course seed 002" are not."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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
