"""JSON is made once, at the edge, from perflab's types.

Results cross perflab's modules as typed objects (dataclasses with attributes); only the edges, a
command's `--json`, a results file, a reference file, turn them into JSON. `to_json(obj)` does that
for any of them:

* a dataclass becomes a dict of its fields, in order, each converted in turn, minus the names in its
  class attribute `JSON_SKIP` and plus the properties named in `JSON_EXTRA` (computed figures such as
  a label); an object with its own `to_json()` method is asked for it;
* a mapping keeps its keys (as text), a list, tuple or set becomes a list;
* numbers, text, booleans and None stay as they are; a NumPy or torch scalar or array becomes
  numbers (`tolist()`); a path becomes its text; anything else its `str()`.

`JSON` is the type of what such an edge returns: a function annotated `-> JSON` builds output for a
person's program or a file, never a result another perflab module reads fields from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

JSON = dict[str, Any]  # a JSON object made at the edge (see the module docstring)


def to_json(obj: Any) -> Any:
    """`obj` as JSON-ready values (module docstring)."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj
    if isinstance(obj, type):
        return str(obj)
    if dataclasses.is_dataclass(obj):
        own = getattr(type(obj), "to_json", None)
        if callable(own):
            return own(obj)
        return _dataclass_to_json(obj)
    if isinstance(obj, Mapping):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_json(v) for v in obj]
    if isinstance(obj, PurePath):
        return str(obj)
    tolist = getattr(obj, "tolist", None)
    if callable(tolist):
        return tolist()
    own = getattr(obj, "to_json", None)
    if callable(own):
        return own()
    try:
        return float(obj)  # pyright: ignore[reportArgumentType]  # any number type; the rest is text below
    except (TypeError, ValueError):
        return str(obj)


def _dataclass_to_json(obj: Any) -> JSON:
    skip = set(getattr(type(obj), "JSON_SKIP", ()))
    out: JSON = {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name not in skip}
    for name in getattr(type(obj), "JSON_EXTRA", ()):
        value = getattr(obj, name)
        out[name] = to_json(value() if callable(value) else value)
    return out


def fields_json(obj: Any) -> JSON:
    """A dataclass's own fields and `JSON_EXTRA` as JSON, ignoring any `to_json` method it has (for a
    `to_json` that adds to the default rather than replacing it)."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"fields_json takes a dataclass instance (got {type(obj).__name__})")
    return _dataclass_to_json(obj)


def package_json(package: str, name: str) -> Any:
    """A JSON file that ships with perflab, `data/<name>` inside `package` (e.g. "perflab.plan"), as read:
    reading it is an edge too, and the module that owns the file turns it into its own types."""
    import json
    from importlib import resources

    return json.loads(resources.files(package).joinpath(f"data/{name}").read_text())
