"""Graph breaks and recompiles: `torch._dynamo.explain` as a report, and a recompile counter.

A graph break ends the graph dynamo is capturing and hands control back to Python; the code
after it is captured as another graph. Each break costs a host round trip and the fusions that
would have crossed it. Note: how many breaks a construct causes depends on the torch version
(complex-number RoPE broke graphs in the torch the PyTorch blog post "Maximizing training throughput
using PyTorch FSDP and torch.compile" used, pytorch.org/blog/maximizing-training-throughput/; recent
releases capture it).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from perflab.core.errors import InputError


@dataclass
class BreakReport:
    graphs: int
    graph_breaks: int
    ops: int
    breaks: list[dict] = field(default_factory=list)  # {"reason", "where"}

    def as_dict(self) -> dict:
        return {"graphs": self.graphs, "graph_breaks": self.graph_breaks, "ops": self.ops, "breaks": self.breaks}

    def describe(self) -> str:
        lines = [f"{self.graph_breaks} graph break(s), {self.graphs} graph(s), {self.ops} captured op(s)"]
        for i, b in enumerate(self.breaks, 1):
            lines.append(f"  {i}. {b['reason']}  at {b['where']}")
        return "\n".join(lines)


def _first_line(reason: str) -> str:
    return " ".join(reason.strip().splitlines()[0].split())[:160] if reason else "?"


def explain(fn, *args, **kwargs) -> BreakReport:
    """Run `torch._dynamo.explain(fn)(*args)` (it traces; it does not compile) and summarise it."""
    torch._dynamo.reset()
    quiet = logging.getLogger("torch._dynamo")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        e = torch._dynamo.explain(fn)(*args, **kwargs)
    finally:
        quiet.setLevel(level)
        torch._dynamo.reset()
    breaks = []
    for r in e.break_reasons:
        where = "?"
        if r.user_stack:
            f = r.user_stack[-1]
            where = f"{Path(f.filename).name}:{f.lineno} in {f.name}"
        breaks.append({"reason": _first_line(r.reason), "where": where})
    # dynamo's own graph_break_count is graph_count - 1: a break with no graph after it (a print
    # before `return`) or between two breaks would go uncounted. Every reason listed is a break.
    return BreakReport(graphs=e.graph_count, graph_breaks=max(e.graph_break_count, len(breaks)), ops=e.op_count,
                       breaks=breaks)


def load_factory(spec: str):
    """The callable named by 'MODULE:FACTORY'; MODULE is an importable module or a .py file path."""
    if ":" not in spec:
        raise InputError(f"--explain wants MODULE:FACTORY (e.g. mymodel.py:build), got {spec!r}")
    mod_name, _, attr = spec.rpartition(":")
    if not mod_name or not attr:
        raise InputError(f"--explain wants MODULE:FACTORY, got {spec!r}")
    if mod_name.endswith(".py") or "/" in mod_name:
        path = Path(mod_name)
        if not path.is_file():
            raise InputError(f"no such model file: {mod_name}")
        name = f"_perflab_user_{path.stem}"
        s = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(s)
        sys.modules[name] = module
        try:
            s.loader.exec_module(module)
        except Exception as exc:  # the user's file: say what failed in one line
            raise InputError(f"importing {mod_name} failed: {type(exc).__name__}: {exc}") from None
    else:
        try:
            module = importlib.import_module(mod_name)
        except ImportError as exc:
            raise InputError(f"cannot import {mod_name!r}: {exc}") from None
    fac = getattr(module, attr, None)
    if not callable(fac):
        raise InputError(f"{mod_name} has no callable {attr!r}")
    return fac


def example_input(model: torch.nn.Module, batch: int = 2, seq: int = 16) -> torch.Tensor:
    """Token ids for a model with a `dims['vocab']`, an `embed` embedding or a `cfg.vocab`."""
    vocab = getattr(model, "dims", {}).get("vocab") if hasattr(model, "dims") else None
    if vocab is None and hasattr(model, "cfg"):
        vocab = model.cfg.vocab
    if vocab is None and isinstance(getattr(model, "embed", None), torch.nn.Embedding):
        vocab = model.embed.num_embeddings
    if vocab is None:
        raise InputError("cannot tell the model's input: let the factory return (model, example_inputs)")
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))


def explain_factory(spec: str) -> BreakReport:
    """Build the model from 'MODULE:FACTORY' and explain it. The factory returns a module (its
    input is guessed as token ids) or a pair (model, tuple of example inputs)."""
    import contextlib

    # the user's model may print: keep stdout for the report (and its JSON)
    with contextlib.redirect_stdout(sys.stderr):
        built = load_factory(spec)()
        if isinstance(built, tuple) and len(built) == 2:
            model, inputs = built
            inputs = inputs if isinstance(inputs, tuple) else (inputs,)
        else:
            model, inputs = built, (example_input(built),)
        return explain(model, *inputs)


class RecompileCounter:
    """A dynamo backend that counts the graphs it is handed (each compile or recompile) and runs
    them eagerly, so counting costs no inductor time."""

    def __init__(self):
        self.frames = 0

    def __call__(self, gm, example_inputs):
        self.frames += 1
        return gm.forward


def recompiles_over_lengths(model: torch.nn.Module, lengths, *, dynamic: bool | None = None, mark: bool = False,
                            batch: int = 2, vocab: int | None = None) -> list[dict]:
    """Call a compiled `model` on inputs of each sequence length; after each call, the graphs
    compiled so far. dynamic=None is torch's default (specialise, then go dynamic on the second
    shape); True compiles dynamic from the start; mark=True calls `torch._dynamo.mark_dynamic`."""
    torch._dynamo.reset()
    counter = RecompileCounter()
    compiled = torch.compile(model, backend=counter, dynamic=dynamic)
    vocab = vocab or example_input(model).max().item() + 1
    out = []
    for s in lengths:
        x = torch.randint(0, vocab, (batch, s), generator=torch.Generator().manual_seed(s))
        if mark:
            torch._dynamo.mark_dynamic(x, 1)
        with torch.no_grad():
            compiled(x)
        out.append({"seq": s, "graphs_compiled": counter.frames})
    torch._dynamo.reset()
    return out
