"""The loss's graph breaks, as `perflab compile --explain` reports them (lesson 10): where each is, why,
and how often it ran in one forward. A loss dynamo cannot trace is one note, never the learner's error."""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from perflab.audit.report import GraphBreak, GraphBreaks

NOT_READ = "graph breaks not read"  # how the note of a loss dynamo could not trace begins


def graph_breaks(model: torch.nn.Module, loss_fn: Callable[[torch.nn.Module, Any], Any],
                 batch: Any) -> tuple[GraphBreaks, str]:
    """(the breaks of the loss's forward on `batch`, a note: '' or why they were not read)."""
    from perflab.compiler.breaks import count_executions, explain

    def fwd(b):
        return loss_fn(model, b)

    try:
        with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), _quiet_stderr():
            rep = explain(fwd, batch)
            if rep.breaks:
                runs = count_executions(fwd, (batch,), {}, [(b["file"], b["line"]) for b in rep.breaks])
                for b in rep.breaks:
                    b["hits"] = runs[(b["file"], b["line"])]
    except Exception as e:  # noqa: BLE001 - the tracer's limit, not the learner's error: said in one note
        return GraphBreaks([], read=False), f"{NOT_READ}: torch._dynamo could not trace the loss ({type(e).__name__})"
    return GraphBreaks([GraphBreak(b["file"], b["line"], b["where"], b["reason"], b.get("hits"))
                        for b in rep.breaks]), ""


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    err = sys.stderr
    sys.stderr = io.StringIO()
    try:
        yield
    finally:
        sys.stderr = err
