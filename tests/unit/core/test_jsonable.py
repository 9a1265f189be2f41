"""Tests of `perflab.core.jsonable`: JSON made once, at the edge, from typed results."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch

from perflab.core.jsonable import fields_json, package_json, to_json


@dataclass
class Inner:
    x: float
    tag: str = "a"


@dataclass
class Outer:
    JSON_SKIP = ("private",)
    JSON_EXTRA = ("double", "label")

    inner: Inner
    rows: list[Inner] = field(default_factory=list)
    private: object = None
    where: Path = Path("/tmp/x")

    @property
    def double(self) -> float:
        return 2 * self.inner.x

    def label(self) -> str:
        return f"x = {self.inner.x}"


@dataclass
class Own:
    v: int

    def to_json(self):
        return {"v": self.v, "own": True, **fields_json(self)}


def test_a_dataclass_becomes_its_fields_then_its_extras_recursively():
    out = to_json(Outer(Inner(1.5), [Inner(2.0, "b")], object()))
    assert out == {"inner": {"x": 1.5, "tag": "a"}, "rows": [{"x": 2.0, "tag": "b"}], "where": "/tmp/x",
                   "double": 3.0, "label": "x = 1.5"}
    assert json.loads(json.dumps(out)) == out


def test_numbers_of_numpy_and_torch_and_own_methods():
    assert to_json({"a": np.float32(0.5), "b": np.arange(3), 3: torch.tensor([1, 2])}) == {"a": 0.5, "b": [0, 1, 2],
                                                                                         "3": [1, 2]}
    assert to_json((1, {2})) == [1, [2]] and to_json(None) is None and to_json(True) is True
    assert to_json(Own(4)) == {"v": 4, "own": True} and to_json(object()).startswith("<object")


def test_a_data_file_that_ships_with_perflab_is_read_from_its_package():
    """The file inside the package named, as parsed; a name the package does not ship is an error."""
    import perflab.plan

    here = Path(perflab.plan.__file__).with_name("data") / "clusters.json"
    assert package_json("perflab.plan", "clusters.json") == json.loads(here.read_text())
    with pytest.raises(FileNotFoundError):
        package_json("perflab.plan", "no_such_file.json")
