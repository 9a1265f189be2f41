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
import inspect
import logging
import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from perflab.core.errors import InputError


@dataclass
class BreakReport:
    graphs: int  # graphs dynamo made in one call (`explain_factory`: counted by a backend, grad on)
    graph_breaks: int  # unique break sites (a site met on several calls counts once)
    ops: int  # their captured ops: call_function nodes, what torch._dynamo.explain's op_count counts
    # {"reason", "where", "file", "line", "hits" (times the line runs in one call; None: not counted), "hints"}
    breaks: list[dict] = field(default_factory=list)
    method_calls: int | None = None  # call_method / call_module nodes of the same graphs (None: not counted)

    def as_dict(self) -> dict:
        return {"graphs": self.graphs, "graph_breaks": self.graph_breaks, "ops": self.ops, "breaks": self.breaks,
                "method_calls": self.method_calls}

    def describe(self) -> str:
        what = (f"{self.graph_breaks} graph break site(s), {self.graphs} graph(s), {self.ops} captured op(s): "
                "the call_function nodes of the forward graphs dynamo captured in one call, which is what "
                "torch._dynamo.explain's op_count counts")
        if self.method_calls:
            what += f" ({self.method_calls} tensor-method or submodule call(s), such as x.view(...), are not counted)"
        lines = [what]
        for i, b in enumerate(self.breaks, 1):
            hits = f" (runs {b['hits']}× per call)" if (b.get("hits") or 0) > 1 else ""
            lines.append(f"  {i}. {b['where']}{hits}: {b['reason']}")
        return "\n".join(lines)


BREAK_LOGGERS = tuple(f"torch._dynamo.{m}.__graph_breaks" for m in ("symbolic_convert", "exc", "convert_frame"))
_WRAPPER = re.compile(r"graph break (encountered|when attempting)|failed to handle graph break|^Graph Break Reason:", re.I)


def reason_text(text: str) -> tuple[str, list[str]]:
    """(reason, hints) from dynamo's graph-break message: its title and its `Explanation:` line (which
    names the construct, e.g. `print`), without the wrapper lines, the developer context or links."""
    lines = [ln.strip() for ln in (text or "").splitlines()]
    expl = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Explanation:")), "")
    hints = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Hint:") and "report an issue" not in ln]
    title = ""
    for ln in lines:
        body = ln.split("Graph Break Reason:", 1)[-1].strip()
        if not body or body.startswith(("Explanation:", "Hint:", "Developer debug context", "For more details",
                                        "Graph break in user code")):
            continue
        if _WRAPPER.search(body) and body.endswith(":"):
            continue
        title = body
        break
    reason = " ".join(f"{title}: {expl}".split()) if expl and expl not in title else " ".join(title.split())
    return reason or "?", hints


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.messages.append(record.getMessage())
        except Exception:  # noqa: BLE001 - a message that cannot be formatted is not a break we can report
            pass


def _site_of_message(msg: str) -> tuple[str, int, str] | None:
    """(file, line, function) of a graph-break log message: its 'at FILE:LINE' and the last frame of
    its user traceback."""
    m = re.search(r"Graph break in user code at (.+?):(\d+)", msg)
    if not m:
        return None
    frames = re.findall(r'File "(.+?)", line (\d+), in (\S+)', msg)
    fn = next((f for path, ln, f in reversed(frames) if path == m.group(1) and ln == m.group(2)), "")
    return m.group(1), int(m.group(2)), fn


class _LineCounter:
    """The trace hooks of `count_executions`: `calls` is the global hook (it turns line tracing on
    only in the files of the sites), `local` counts each site line as it runs."""

    def __init__(self, sites: list[tuple[str, int]]):
        self.want = {(os.path.realpath(p), ln) for p, ln in sites}
        self.files = {p for p, _ in self.want}
        self.real: dict[str, str] = {}
        self.counts: dict[tuple[str, int], int] = {}

    def where(self, code) -> str:
        name = code.co_filename
        if name not in self.real:
            self.real[name] = os.path.realpath(name)
        return self.real[name]

    def local(self, frame, event, arg):
        if event == "line":
            k = (self.where(frame.f_code), frame.f_lineno)
            if k in self.want:
                self.counts[k] = self.counts.get(k, 0) + 1
        return self.local

    def calls(self, frame, event, arg):
        return self.local if event == "call" and self.where(frame.f_code) in self.files else None


def count_executions(fn, args: tuple, kwargs: dict, sites: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """How many times each (file, line) runs in one eager call `fn(*args, **kwargs)`: a break site
    in a child module called three times runs three times. Traces only the files of the sites."""
    counter = _LineCounter(sites)
    before = sys.gettrace()  # a coverage tracer, say: put it back afterwards
    sys.settrace(counter.calls)
    try:
        fn(*args, **kwargs)
    finally:
        sys.settrace(before)
    return {(p, ln): counter.counts.get((os.path.realpath(p), ln), 0) for p, ln in sites}


def explain(fn, *args, **kwargs) -> BreakReport:
    """Run `torch._dynamo.explain(fn)(*args, **kwargs)` (it traces; it does not compile) and summarise
    it: one entry per break *site* (file and line), with the full reason and how often dynamo met it.

    dynamo's own `break_reasons` misses some breaks (one in a child module whose frame falls back to
    eager) and lists a site again on each call; its graph-break log names each, so both are read."""
    torch._dynamo.reset()
    quiet = logging.getLogger("torch._dynamo")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    collect = _Collect()
    saved = []
    for name in BREAK_LOGGERS:
        lg = logging.getLogger(name)
        saved.append((lg, lg.level, lg.propagate))
        lg.addHandler(collect)
        lg.setLevel(logging.DEBUG)
        lg.propagate = False  # collected here, not printed
    try:
        e = torch._dynamo.explain(fn)(*args, **kwargs)
    finally:
        quiet.setLevel(level)
        for lg, lv, prop in saved:
            lg.removeHandler(collect)
            lg.setLevel(lv)
            lg.propagate = prop
        torch._dynamo.reset()
    sites: dict[str, dict] = {}
    for msg in collect.messages:
        where = _site_of_message(msg)
        if where is None:
            continue
        path, line, func = where
        key = f"{path}:{line}"
        if key not in sites:
            reason, hints = reason_text(msg)
            sites[key] = {"reason": reason, "where": f"{Path(path).name}:{line}" + (f" in {func}" if func else ""),
                          "file": path, "line": line, "hits": None, "hints": hints}
    for r in e.break_reasons:  # what the log did not name
        if not r.user_stack:
            continue
        f = r.user_stack[-1]
        key = f"{f.filename}:{f.lineno}"
        if key in sites:
            continue
        reason, hints = reason_text(r.reason)
        sites[key] = {"reason": reason, "where": f"{Path(f.filename).name}:{f.lineno} in {f.name}",
                      "file": f.filename, "line": f.lineno, "hits": None, "hints": hints}
    breaks = list(sites.values())
    # dynamo's graph_break_count is graph_count - 1: a break with no graph after it (a print before
    # `return`) would go uncounted; a site met on several calls is one break to fix
    count = len(breaks) if breaks else e.graph_break_count
    return BreakReport(graphs=e.graph_count, graph_breaks=count, ops=e.op_count, breaks=breaks)


class UserCodeError(InputError):
    """The user's own code (a factory, a model's forward) raised; the message says where, in their file."""


def user_error(exc: BaseException, what: str, user_file: str | None = None) -> UserCodeError:
    """One line for an exception raised in the user's code: what failed, the error, and the frame it
    came from in their file (else the last frame outside torch and perflab)."""
    frames = traceback.extract_tb(exc.__traceback__)
    pick = None
    if user_file:
        pick = next((f for f in reversed(frames) if Path(f.filename).resolve() == Path(user_file).resolve()), None)
    if pick is None:
        inside = ("/torch/", "/perflab/", "/importlib/", "<frozen")
        pick = next((f for f in reversed(frames) if not any(s in f.filename for s in inside)), None)
    where = f" (at {Path(pick.filename).name}:{pick.lineno} in {pick.name})" if pick else ""
    msg = " ".join(str(exc).split()) or "no message"
    return UserCodeError(f"{what} raised {type(exc).__name__}: {msg[:300]}{where}; this is your model's error, "
                         "not perflab's: fix it and run again")


def load_factory(spec: str):
    """The callable named by 'MODULE:FACTORY'; MODULE is a .py file path or a module importable from
    the current directory (or sys.path). Returns (callable, the module's file or None)."""
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
        if s is None or s.loader is None:
            raise InputError(f"cannot load {mod_name} as Python")
        module = importlib.util.module_from_spec(s)
        sys.modules[name] = module
        sys.path.insert(0, str(path.resolve().parent))  # its own imports of files beside it
        try:
            s.loader.exec_module(module)
        except Exception as exc:  # the user's file: say what failed in one line
            raise user_error(exc, f"importing {mod_name}", str(path)) from None
        finally:
            sys.path.remove(str(path.resolve().parent))
    else:
        cwd = str(Path.cwd())
        added = cwd not in sys.path
        if added:  # `python -m` and `python script.py` see the current directory; so does this
            sys.path.insert(0, cwd)
        try:
            module = importlib.import_module(mod_name)
        except ModuleNotFoundError as exc:
            if exc.name and mod_name.startswith(exc.name):
                raise InputError(f"cannot import {mod_name!r}: no module of that name in {cwd} or on sys.path "
                                 "(give a .py path, e.g. ./mymodel.py:build)") from None
            raise user_error(exc, f"importing {mod_name}", None) from None
        except Exception as exc:  # noqa: BLE001 - the user's module failed while importing
            raise user_error(exc, f"importing {mod_name}", None) from None
        finally:
            if added:
                sys.path.remove(cwd)
    fac = getattr(module, attr, None)
    if fac is None:
        raise InputError(f"{mod_name} has no {attr!r}")
    if not callable(fac):
        raise InputError(f"{mod_name}:{attr} is a {type(fac).__name__}, not a factory: give a function that "
                         "returns the model, or (model, example_inputs)")
    return fac, getattr(module, "__file__", None)


def example_input(model: torch.nn.Module, batch: int = 2, seq: int = 16) -> torch.Tensor:
    """Token ids for a model with a `dims['vocab']`, an `embed` embedding, a `cfg.vocab` or a Hugging
    Face `config.vocab_size`."""
    dims = getattr(model, "dims", None)
    vocab: Any = dims.get("vocab") if isinstance(dims, dict) else None
    if vocab is None:
        vocab = getattr(getattr(model, "cfg", None), "vocab", None)
    embed = getattr(model, "embed", None)
    if vocab is None and isinstance(embed, torch.nn.Embedding):
        vocab = embed.num_embeddings
    if vocab is None:
        vocab = getattr(getattr(model, "config", None), "vocab_size", None)  # a Hugging Face model
    if not isinstance(vocab, int):
        raise InputError("cannot tell the model's input: let the factory return (model, example_inputs), where "
                         "example_inputs is a tensor, a tuple/list of positional inputs or a dict of keyword inputs")
    return torch.randint(0, int(vocab), (batch, seq), generator=torch.Generator().manual_seed(0))


def split_built(built: Any) -> tuple[Any, tuple, dict]:
    """(model, args, kwargs) from what a factory returned: a module; (model, inputs) as a tuple or a
    list; inputs a tensor, a tuple/list of positional inputs, or a dict of keyword inputs; or
    (model, args, kwargs)."""
    if isinstance(built, (tuple, list)):
        if len(built) == 3 and isinstance(built[2], dict):
            model, args, kwargs = built
            args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
        elif len(built) == 2:
            model, inputs = built
            if isinstance(inputs, dict):
                args, kwargs = (), dict(inputs)
            elif isinstance(inputs, (tuple, list)):
                args, kwargs = tuple(inputs), {}
            else:
                args, kwargs = (inputs,), {}
        else:
            raise InputError(f"the factory returned a {type(built).__name__} of {len(built)} items: return the "
                             "model, or (model, example_inputs), or (model, args, kwargs)")
    else:
        model, args, kwargs = built, None, {}
    if not callable(model):
        raise InputError(f"the factory's model is a {type(model).__name__}, which cannot be called: return an "
                         "nn.Module (or a function) first")
    if args is None:
        if not isinstance(model, torch.nn.Module):
            raise InputError("cannot tell the model's input: let the factory return (model, example_inputs)")
        args = (example_input(model),)
    return model, args, kwargs


def build_from_factory(spec: str):
    """(model, args, kwargs) from 'MODULE:FACTORY'. A class given in place of a factory is built with
    no arguments when it can be; otherwise, and when the factory raises, one line says so."""
    fac, user_file = load_factory(spec)
    if isinstance(fac, type):
        try:
            inspect.signature(fac).bind()
        except TypeError:
            sig = ""
            try:
                sig = str(inspect.signature(fac))
            except (TypeError, ValueError):
                pass
            raise InputError(f"{spec} is a class that needs arguments{' ' + sig if sig else ''}, not a factory: write a "
                             f"function that builds it and returns (model, example_inputs), e.g. "
                             f"def build(): return {fac.__name__}(...), torch.randn(...)") from None
        except ValueError:
            pass
    try:
        built = fac()
    except Exception as exc:  # noqa: BLE001 - the user's factory
        raise user_error(exc, f"the factory {spec}", user_file) from None
    return (*split_built(built), user_file)


def explain_factory(spec: str) -> BreakReport:
    """Build the model from 'MODULE:FACTORY' and explain it. The factory returns a module (its input
    is guessed as token ids), (model, example_inputs) or (model, args, kwargs); see `split_built`.
    The model is first run once eagerly, so an error in its forward is reported as the user's, in
    one line with their file and line, not as a failure of the tracer."""
    import contextlib

    # the user's model may print: keep stdout for the report (and its JSON)
    with contextlib.redirect_stdout(sys.stderr):
        model, args, kwargs, user_file = build_from_factory(spec)
        try:
            with torch.no_grad():
                model(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the user's forward
            raise user_error(exc, f"the model from {spec}, run on its example input,", user_file) from None
        try:
            # with gradients on, as in a training step: whether a tensor requires grad is part of
            # dynamo's guards, so a child module called in a loop (its input a leaf, then an output)
            # is compiled twice there, and once under no_grad
            with torch.enable_grad():
                rep = explain(model, *args, **kwargs)
                graphs, ops, methods = compiled_graph_nodes(model, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - eager ran, so this is the tracer's limit, said in one line
            raise InputError(f"torch._dynamo could not trace the model from {spec} (eager runs): "
                             f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from None
        rep.graphs, rep.ops, rep.method_calls = graphs, ops, methods  # the compiler's graphs, counted by its backend
        if rep.breaks:  # how often each site runs in one forward: a child called 3 times breaks 3 times
            with torch.no_grad():
                runs = count_executions(model, args, kwargs, [(b["file"], b["line"]) for b in rep.breaks])
            for b in rep.breaks:
                b["hits"] = runs[(b["file"], b["line"])]
        return rep


def compiled_graphs(fn, args: tuple, kwargs: dict) -> tuple[int, int]:
    """(graphs, ops) that `torch.compile` hands its backend in one call `fn(*args, **kwargs)`, in the
    caller's grad mode: every graph dynamo makes, recompiles of a frame included (a guard that fails
    on the second pass of a loop gives a second graph), and their call_function nodes (the ops, as
    `torch._dynamo.explain` counts them). Runs them eagerly: no inductor time."""
    graphs, ops, _ = compiled_graph_nodes(fn, args, kwargs)
    return graphs, ops


def compiled_graph_nodes(fn, args: tuple, kwargs: dict) -> tuple[int, int, int]:
    """(graphs, call_function nodes, call_method + call_module nodes) of the graphs `torch.compile` hands
    its backend in one call (see `compiled_graphs`)."""
    torch._dynamo.reset()
    counts: list[tuple[int, int]] = []

    def backend(gm, example_inputs):
        ops = [n.op for n in gm.graph.nodes]
        counts.append((ops.count("call_function"), ops.count("call_method") + ops.count("call_module")))
        return gm.forward

    try:
        torch.compile(fn, backend=backend)(*args, **kwargs)
    finally:
        torch._dynamo.reset()
    return len(counts), sum(c[0] for c in counts), sum(c[1] for c in counts)


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
    vocab = vocab or int(example_input(model).max().item()) + 1
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


SETTINGS = {"static (dynamic=False)": {"dynamic": False}, "default": {}, "dynamic=True": {"dynamic": True},
            "mark_dynamic": {"mark": True}}


@dataclass
class Recompiles:
    """Graphs compiled after each sequence length, per dynamic-shape setting (`SETTINGS`): one row per
    setting, {"setting", "graphs after s=L" for each length L} (what `explain.explain_recompiles` reads)."""

    lengths: list[int]
    rows: list[dict[str, Any]]

    def graphs(self, setting: str) -> int:
        """Graphs `setting` had compiled after the last length."""
        for r in self.rows:
            if r["setting"] == setting:
                return int(r[f"graphs after s={self.lengths[-1]}"])
        raise InputError(f"unknown setting {setting!r}: use one of {', '.join(SETTINGS)}")

    def table(self):
        import pandas as pd

        return pd.DataFrame(self.rows)


def recompile_settings(model: torch.nn.Module, lengths=(16, 24, 32)) -> Recompiles:
    """`recompiles_over_lengths` for each of `SETTINGS` (static, torch's default, dynamic, mark_dynamic)."""
    lengths = [int(s) for s in lengths]
    rows = []
    for label, kw in SETTINGS.items():
        r = recompiles_over_lengths(model, lengths, **kw)
        rows.append({"setting": label, **{f"graphs after s={d['seq']}": d["graphs_compiled"] for d in r}})
    return Recompiles(lengths, rows)
