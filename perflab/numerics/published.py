"""Published fp8 training results, kept as data with their sources (perflab/numerics/data/published_fp8.json).

End-to-end figures (a whole training step, at scale, with every pass and all communication) are what
a job gains, not what one GEMM gains: lesson 16 shows them beside its one-GEMM prediction, labelled as
published and not measured here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from perflab.core.jsonable import package_json


@dataclass(frozen=True)
class Source:
    title: str
    url: str
    section: str

    def text(self) -> str:
        """'title, address (section)'; an arXiv paper by its identifier, as arXiv:2209.05433."""
        where = self.url.removeprefix("https://arxiv.org/abs/")
        return f"{self.title}, {'arXiv:' + where if where != self.url else self.url} ({self.section})"


@dataclass(frozen=True)
class Figure:
    """One published speedup (`value`, up to `value_high` when a range) with its source."""

    id: str
    what: str
    value: float
    unit: str
    hardware: str
    recipe: str
    source: Source
    value_high: float | None = None

    def shown(self) -> str:
        """As the source states it: '1.25×', '1.34–1.43×'."""
        if self.value_high is None:
            return f"{self.value:g}{self.unit}"
        return f"{self.value:g}–{self.value_high:g}{self.unit}"


@dataclass(frozen=True)
class Recipe:
    id: str
    what: str
    source: Source


@lru_cache(maxsize=1)
def _raw() -> dict[str, Any]:
    return package_json("perflab.numerics", "published_fp8.json")


def figures() -> tuple[Figure, ...]:
    return tuple(Figure(f["id"], f["what"], float(f["value"]), f["unit"], f["hardware"], f["recipe"], Source(**f["source"]),
                        None if f.get("value_high") is None else float(f["value_high"])) for f in _raw()["figures"])


def recipes() -> tuple[Recipe, ...]:
    return tuple(Recipe(r["id"], r["what"], Source(**r["source"])) for r in _raw()["recipes"])


def figure(fid: str) -> Figure:
    for f in figures():
        if f.id == fid:
            return f
    raise KeyError(f"no published fp8 figure {fid!r}; known: {', '.join(f.id for f in figures())}")


def recipe(rid: str) -> Recipe:
    for r in recipes():
        if r.id == rid:
            return r
    raise KeyError(f"no published fp8 recipe {rid!r}; known: {', '.join(r.id for r in recipes())}")


@dataclass(frozen=True)
class PublishedTable:
    """The figures and recipes, for a lesson: published, not measured here."""

    def table(self):
        import pandas as pd

        rows = [{"published (not measured here)": f.what, "speedup": f.shown(), "hardware": f.hardware,
                 "recipe": f.recipe, "source": f.source.text()} for f in figures()]
        return pd.DataFrame(rows).set_index("published (not measured here)")

    def recipes_table(self):
        import pandas as pd

        rows = [{"recipe (published)": r.what, "source": r.source.text()} for r in recipes()]
        return pd.DataFrame(rows).set_index("recipe (published)")
