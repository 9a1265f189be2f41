"""Checks for labs/10_graph_breaks.ipynb: remove a model's graph breaks without changing what it computes.

The learner is given `perflab.compiler.models.BrokenLM` (a print, a `.item()` read back to Python,
a branch on that value, RoPE in complex numbers) and writes
* `rope_real(x, angles)`: RoPE in real arithmetic; `check_rope` compares it with the complex form;
* a model class with BrokenLM's parameters whose forward has no graph break; `check_model` builds
  the original and the learner's model on the same weights, runs `torch._dynamo.explain` (it
  traces, it does not compile: about a second for this small model) and requires 0 breaks, then
  compares the logits of both models on the same inputs.

Tolerance: the model runs in fp32 (machine epsilon 2^-23 ≈ 1.2e-7). Removing the breaks reorders
a few roundings (complex multiply → real multiply-adds, the rescale as a tensor op), which moves
logits of size ~1 by ~1e-6 at most. `parity.tolerance(fp32)` = 1e-4 (~1000 eps,
relative and absolute) is far above that and far below a real mistake: RoPE on the wrong pairs
(the two halves of the head instead of interleaved pairs) moves the logits by ~0.1 to 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from perflab.compiler import breaks, models, parity
from perflab.grading.checks import LabCheckError, Verdict, record

DIMS = dict(vocab=64, hidden=32, heads=2, layers=1, d_ff=64, seq_len=16)
SEED = 10
DTYPE = torch.float32


def tolerance() -> float:
    """Relative and absolute tolerance on the logits (fp32: see the module's docstring)."""
    return parity.tolerance(DTYPE)


def given_model() -> models.BrokenLM:
    """The model with graph breaks the learner starts from (it prints in its forward)."""
    m = models.BrokenLM(**DIMS, seed=SEED)
    m.verbose = True
    return m


def inputs() -> list[torch.Tensor]:
    """Token ids the check feeds both models: the full length and a shorter one."""
    g = torch.Generator().manual_seed(SEED)
    return [torch.randint(0, DIMS["vocab"], (2, s), generator=g) for s in (DIMS["seq_len"], DIMS["seq_len"] // 2)]


LOUD_TOKEN, LOUD_GAIN = 3, 1e6


def loud_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights with token LOUD_TOKEN's embedding × 1e6: its activations reach ~4e4, past
    the forward's 1e4 threshold, so the rescale `x / scale` runs. (The RMSNorm after it is scale-free
    except for its eps, and the rescale makes the other tokens' rows ~1e-6: there the eps decides, so
    a forward that drops the rescale gives logits that differ by ~1.)"""
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    sd["embed.weight"][LOUD_TOKEN] *= LOUD_GAIN
    return sd


def loud_inputs() -> torch.Tensor:
    """Token ids with one loud token in the first sequence."""
    g = torch.Generator().manual_seed(SEED + 1)
    x = torch.randint(4, DIMS["vocab"], (2, DIMS["seq_len"] // 2), generator=g)
    x[0, 0] = LOUD_TOKEN
    return x


def _not_done(name: str) -> Verdict:
    print(f"… {name}: not done yet — fill in the function and run this cell again.")
    return record(name, False)


def _passed(name: str, what: str) -> Verdict:
    print(f"✓ {name}: {what}")
    return record(name, True)


def check_rope(student: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Verdict:
    """`student(x, angles)` must equal `models.rope_complex(x, angles)` within the fp32 tolerance."""
    from perflab.grading.guard import refuse_perflab

    name, tol = "rope_real", tolerance()
    g = torch.Generator().manual_seed(SEED)
    checked = False
    for shape in ((2, 2, 8, 16), (1, 3, 5, 4), (3, 1, 7, 6)):
        x = torch.randn(*shape, generator=g)
        angles = models.rope_angles(shape[-2], shape[-1])
        try:
            got = student(x, angles)
        except NotImplementedError:
            return _not_done(name)
        if not checked:
            refuse_perflab(name, student, [models.rope_complex, models.rope_real])
            checked = True
        if got is None:
            raise LabCheckError(f"{name}: returned None for x of shape {tuple(shape)}; did you forget `return`?")
        want = models.rope_complex(x, angles)
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            raise LabCheckError(f"{name}: for x of shape {tuple(shape)} expected a tensor of the same shape, got "
                                f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
        if torch.is_complex(got):
            raise LabCheckError(f"{name}: the result is complex; compute the rotation with real tensors")
        err = (got - want).abs().max().item()
        if not torch.allclose(got, want, rtol=tol, atol=tol):
            raise LabCheckError(
                f"{name}: for x of shape {tuple(shape)} the largest difference from the complex RoPE is {err:.2g} "
                f"(allowed {tol:.0e}). Hint: the pairs are interleaved, (x[..., 0], x[..., 1]), (x[..., 2], x[..., 3]), "
                f"...; pair i turns by angles[..., i]: (a, b) → (a·cos − b·sin, a·sin + b·cos)")
    return _passed(name, "equal to the complex-number RoPE on 3 cases")


def check_model(model_cls: Callable[..., torch.nn.Module]) -> Verdict:
    """`model_cls(**DIMS)` with BrokenLM's weights: 0 graph breaks and the same logits."""
    name, tol = "no graph breaks", tolerance()
    original = given_model()
    original.verbose = False  # the original's print is a break of its own, not output
    from perflab.grading.guard import refuse_perflab

    try:
        mine = model_cls(**DIMS)
    except NotImplementedError:
        return _not_done(name)
    except TypeError as exc:
        raise LabCheckError(f"{name}: {getattr(model_cls, '__name__', model_cls)}(**{DIMS}) failed ({exc}); "
                            "subclass BrokenLM and keep its constructor") from None
    refuse_perflab(name, model_cls, [models.FixedLM, models.fixed_from, models.rope_real])
    try:
        mine.load_state_dict(original.state_dict())
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise LabCheckError(f"{name}: your model must have BrokenLM's parameters ({first[0] if first else exc}); "
                            "change the forward, not the layers") from None
    if hasattr(mine, "verbose"):
        # as the given model: a print kept under `if self.verbose` is still a break
        mine.verbose = True  # pyright: ignore[reportArgumentType] - a plain flag on the model, not a submodule
    mine.eval()
    xs = inputs()
    with torch.no_grad():
        try:
            outs = [mine(x) for x in xs]
        except NotImplementedError:
            return _not_done(name)
        rep = breaks.explain(mine, xs[0])
        if rep.graph_breaks:
            raise LabCheckError(f"{name}: torch._dynamo.explain still finds {rep.graph_breaks} graph break(s):\n"
                                + "\n".join(f"  {b['reason']}  at {b['where']}" for b in rep.breaks))
        for x, got in zip(xs, outs):
            want = original(x)
            if not isinstance(got, torch.Tensor) or got.shape != want.shape:
                raise LabCheckError(f"{name}: for input ids of shape {tuple(x.shape)} expected logits of shape "
                                    f"{tuple(want.shape)}, got "
                                    f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
            if not torch.allclose(got, want, rtol=tol, atol=tol):
                err = (got - want).abs().max().item()
                raise LabCheckError(
                    f"{name}: 0 breaks, but the logits differ from the original's by up to {err:.2g} for input ids "
                    f"of shape {tuple(x.shape)} (allowed {tol:.0e}, fp32). Removing a break must not change what "
                    "the model computes: check your RoPE and that every step of the original forward is still there")
        # inputs that reach the threshold: the rescale must still happen, as a tensor op
        weights = loud_weights(original)
        original.load_state_dict(weights)
        mine.load_state_dict(weights)
        loud = loud_inputs()
        want, got = original(loud), mine(loud)
        if not torch.allclose(got, want, rtol=tol, atol=tol):
            err = (got - want).abs().max().item()
            raise LabCheckError(
                f"{name}: when the activations pass the 1e4 threshold (one token's embedding × {LOUD_GAIN:.0e}) your "
                f"logits differ from the original's by up to {err:.2g} (allowed {tol:.0e}). This is a deleted "
                "rescale: keep `x / scale` when the max exceeds 1e4, as data: "
                "torch.where(scale > 1e4, x / scale, x) with scale a tensor")
    return _passed(name, f"0 graph breaks, logits equal to the original's within {tol:.0e} on {len(xs) + 1} inputs, "
                         "one past the rescale threshold")


# --- for `perflab grade` (perflab/classroom/judge.py): graded apart from the learner's notebook -------
LEARNER_ANSWERS = ("rope_real", "MyLM")
REFERENCES = {"rope_real": models.rope_complex}
# FixedLM's own forward is the answer (BrokenLM builds on its constructor and blocks, which stay): disarmed
FORBIDDEN = (models.rope_complex, models.rope_real, models.fixed_from, ("perflab.compiler.models", "FixedLM.forward"))
HELPERS = ("tolerance", "given_model", "inputs", "loud_weights", "loud_inputs", "probe_model", "probe_graphs",
           "run_graphs", "run_graph", "graph_of", "_build", "_op")
MAX_NODES = 20_000  # a traced graph's nodes: the lab's model has about 80


def _build(model_cls) -> torch.nn.Module | dict:
    """The learner's model, built as the checks build it, or the verdict on why it cannot be."""
    from perflab.grading.guard import uses_perflab

    hits = uses_perflab(model_cls, [models.FixedLM])
    if hits:
        return {"wrong": f"your model uses perflab's own {', '.join(hits)}, which is the answer; write the forward yourself"}
    try:
        mine = model_cls(**DIMS)
    except NotImplementedError:
        return {"not_done": True}
    except TypeError as exc:
        return {"wrong": f"{getattr(model_cls, '__name__', model_cls)}(**{DIMS}) failed ({exc}); subclass BrokenLM and "
                         "keep its constructor"}
    if hasattr(mine, "verbose"):
        mine.verbose = True  # pyright: ignore[reportArgumentType]
    mine.eval()
    return mine


def probe_model(model_cls, state_dicts: list[dict], xs: list[torch.Tensor], explain: bool = True) -> dict:
    """Run in the learner's confined process: build `model_cls(**DIMS)`, count its graph breaks (unless
    `explain=False`), and return its eager logits for each (weights, inputs) pair, for the grader to
    compare in its own process."""
    mine = _build(model_cls)
    if isinstance(mine, dict):
        return mine
    try:
        mine.load_state_dict(state_dicts[0])
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        return {"wrong": f"your model must have BrokenLM's parameters ({first[0] if first else exc}); change the "
                         "forward, not the layers"}
    with torch.no_grad():
        rep = breaks.explain(mine, xs[0]) if explain else None
        outs = []
        for sd, x in zip(state_dicts, xs, strict=True):
            mine.load_state_dict(sd)
            outs.append(mine(x))
    found = {"graph_breaks": rep.graph_breaks, "breaks": [f"{b['reason']}  at {b['where']}" for b in rep.breaks]} \
        if rep is not None else {}
    return {**found, "logits": outs}


def probe_graphs(model_cls, shapes: list[list[int]]) -> dict:
    """Run in the learner's confined process, before it is shown any grading weight or input: build
    the model, count its graph breaks (torch._dynamo.explain, for the message), and trace its forward
    into one graph for each input shape (torch.export, strict: dynamo, as torch.compile traces it; a
    graph break is an error there), written as data (`graph_of`) for a process that never ran the
    learner's code to run (`run_graphs`)."""
    mine = _build(model_cls)
    if isinstance(mine, dict):
        return mine
    with torch.no_grad():
        example = [torch.zeros(shape, dtype=torch.long) for shape in shapes]
        rep = breaks.explain(mine, example[0])
        out: dict = {"graph_breaks": rep.graph_breaks, "breaks": [f"{b['reason']}  at {b['where']}" for b in rep.breaks]}
        if rep.graph_breaks:
            return out
        graphs = []
        for x in example:
            try:
                graphs.append(graph_of(torch.export.export(mine, (x,), strict=True)))
            except Exception as exc:  # noqa: BLE001 - what dynamo could not trace as one graph, said in a line
                out["export_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:240]}"
                return out
    return {**out, "graphs": graphs}


def graph_of(ep) -> dict:
    """An exported program as data: its inputs (parameters, buffers and constants by name, the token
    ids), its nodes (an ATen operator's name, arguments that are other nodes' names, numbers, dtypes),
    its outputs and its constant tensors. No Python code of the learner's survives in it."""
    import operator

    from torch.fx import Node

    def arg(a):
        if isinstance(a, Node):
            return {"node": a.name}
        if isinstance(a, (list, tuple)):
            return [arg(v) for v in a]
        if isinstance(a, dict):
            return {str(k): arg(v) for k, v in a.items()}
        if isinstance(a, torch.dtype):
            return {"dtype": str(a).replace("torch.", "")}
        if isinstance(a, (torch.device, torch.layout, torch.memory_format)):
            return {type(a).__name__: str(a).replace("torch.", "")}
        if a is None or isinstance(a, (bool, int, float, str)):
            return a
        raise ValueError(f"an argument of type {type(a).__name__} in the traced graph")

    inputs = [{"name": spec.arg.name, "kind": spec.kind.name.lower(), "target": spec.target}
              for spec in ep.graph_signature.input_specs]
    nodes, outputs = [], None
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            outputs = arg(node.args[0])
        elif node.op == "call_function" and (isinstance(node.target, torch._ops.OpOverload)
                                             or node.target is operator.getitem):
            op = "operator.getitem" if node.target is operator.getitem else str(node.target)
            nodes.append({"name": node.name, "op": op, "args": arg(node.args), "kwargs": arg(node.kwargs)})
        else:
            raise ValueError(f"a {node.op} node ({node.target}) in the traced graph")
    return {"inputs": inputs, "nodes": nodes, "outputs": outputs,
            "constants": {str(k): v for k, v in ep.constants.items() if isinstance(v, torch.Tensor)}}


def _op(name: str) -> Callable[..., Any]:
    import operator

    if name == "operator.getitem":
        return operator.getitem
    parts = str(name).split(".")
    if len(parts) != 3 or parts[0] != "aten":
        raise ValueError(f"an operator {str(name)[:60]!r} that is not ATen's")
    op = getattr(getattr(torch.ops.aten, parts[1], None), parts[2], None)
    if not isinstance(op, torch._ops.OpOverload):
        raise ValueError(f"no ATen operator {str(name)[:60]!r}")
    return op


def run_graph(graph: dict, weights: dict, x: torch.Tensor) -> torch.Tensor:
    """Run a graph written by `graph_of` on `weights` (BrokenLM's parameters by name) and the token
    ids `x`; its buffers are the given model's own (the rotary angles), computed here."""
    buffers = dict(given_model().named_buffers())
    env: dict = {}

    def val(a) -> Any:
        if isinstance(a, dict) and set(a) == {"node"}:
            return env[a["node"]]
        if isinstance(a, dict) and set(a) == {"dtype"}:
            return getattr(torch, str(a["dtype"]))
        if isinstance(a, dict) and len(a) == 1 and next(iter(a)) in ("device", "layout", "memory_format"):
            return getattr(torch, str(next(iter(a.values()))), None) if next(iter(a)) != "device" else \
                torch.device(str(a["device"]))
        if isinstance(a, dict):
            return {k: val(v) for k, v in a.items()}
        if isinstance(a, (list, tuple)):
            return [val(v) for v in a]
        return a

    users = 0
    for inp in graph["inputs"]:
        kind, name, target = inp["kind"], inp["name"], inp.get("target")
        if kind == "parameter":
            if target not in weights:
                raise ValueError(f"the graph reads a parameter BrokenLM does not have ({str(target)[:60]})")
            env[name] = weights[target]
        elif kind == "buffer":
            if target not in buffers:
                raise ValueError(f"the graph reads a buffer BrokenLM does not have ({str(target)[:60]})")
            env[name] = buffers[target]
        elif kind == "constant_tensor":
            env[name] = graph["constants"][target]
        elif kind == "user_input":
            env[name] = x
            users += 1
        else:
            raise ValueError(f"a graph input of kind {kind!r}")
    if users != 1 or len(graph["nodes"]) > MAX_NODES:
        raise ValueError("a graph that is not the model's forward on token ids")
    with torch.no_grad():
        for node in graph["nodes"]:
            env[node["name"]] = _op(node["op"])(*val(node["args"]), **val(node["kwargs"]))
    out: Any = val(graph["outputs"])
    out = out[0] if isinstance(out, (list, tuple)) else out
    if not isinstance(out, torch.Tensor):
        raise ValueError("a graph whose output is not a tensor")
    return out


def run_graphs(graphs: list[dict], cases: list[tuple[int, dict, torch.Tensor]]) -> dict:
    """Run in a fresh confined worker that never ran the learner's code: each case's graph on its
    weights and token ids; the logits, or why a graph cannot run."""
    try:
        return {"logits": [run_graph(graphs[i], sd, x) for i, sd, x in cases]}
    except Exception as exc:  # noqa: BLE001 - a graph that does not run is the learner's, said in a line
        return {"wrong": f"the graph traced from your forward does not run ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]})"}


def judge(answers, rng) -> None:
    """rope_real on the lab's cases and on shapes drawn per learner; the model in the learner's
    confined process traced into one graph per input shape before it sees any grading input (a
    graph break is an error), then its eager logits on weights and token ids drawn per learner (and
    the loud weights that pass the rescale threshold), both compared here with the original's; the
    traced graphs run, on the same weights and ids, in a fresh worker that never ran the learner's
    code (`answers.apart`), and compared here too: the compiled forward must compute what the eager
    one does, and nothing the learner's process says about its own breaks is taken on trust."""
    name, tol = "no graph breaks", tolerance()
    if check_rope(answers["rope_real"]):
        hname, f = "rope_real on the grading inputs", answers["rope_real"]
        for _ in range(3):
            shape = (rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 12), 2 * rng.randint(1, 8))
            g = torch.Generator().manual_seed(rng.randint(0, 10**6))
            x = torch.randn(*shape, generator=g)
            angles = models.rope_angles(shape[-2], shape[-1])
            got, want = f(x, angles), models.rope_complex(x, angles)
            if not isinstance(got, torch.Tensor) or got.shape != want.shape or not torch.allclose(got, want, rtol=tol,
                                                                                                 atol=tol):
                raise LabCheckError(f"{hname}: wrong for x of shape {shape}: right on the lab's cases only")
        record(hname, True)
    if "MyLM" not in getattr(answers, "where", {"MyLM": 0}):
        _not_done(name)
        return
    original = given_model()
    original.verbose = False
    g = torch.Generator().manual_seed(rng.randint(0, 10**6))
    base = {k: v.clone() for k, v in original.state_dict().items()}
    drawn = {k: v + 0.05 * torch.randn(v.shape, generator=g) if v.is_floating_point() else v for k, v in base.items()}
    xs = [torch.randint(0, DIMS["vocab"], (2, s), generator=g) for s in (DIMS["seq_len"], rng.randint(2, DIMS["seq_len"]))]
    loud = loud_weights(original)
    pairs = [(base, inputs()[0]), (drawn, xs[0]), (drawn, xs[1]), (loud, loud_inputs())]
    shapes = sorted({tuple(x.shape) for _, x in pairs})
    traced = answers.probe("MyLM", f"{__name__}:probe_graphs", [list(s) for s in shapes])
    if _stops(traced, name):
        return
    if traced.get("export_error"):
        raise LabCheckError(f"{name}: torch.export (dynamo, as torch.compile traces) cannot capture your forward as "
                            f"one graph: {traced['export_error']}")
    rep = answers.probe("MyLM", f"{__name__}:probe_model", [sd for sd, _ in pairs], [x for _, x in pairs], False)
    if _stops(rep, name):
        return
    runs = [("eager", rep.get("logits", []))]
    apart = getattr(answers, "apart", None)
    if apart is not None:
        ran = apart(f"{__name__}:run_graphs", traced.get("graphs", []),
                    [(shapes.index(tuple(x.shape)), sd, x) for sd, x in pairs])
        if ran.get("wrong"):
            raise LabCheckError(f"{name}: {ran['wrong']}")
        runs.append(("compiled", ran.get("logits", [])))
    with torch.no_grad():
        for (sd, x), *gots in zip(pairs, *(r for _, r in runs), strict=True):
            original.load_state_dict(sd)
            want = original(x)
            for (how, _), got in zip(runs, gots):
                if not isinstance(got, torch.Tensor) or got.shape != want.shape or not torch.allclose(
                        got.to(want.dtype), want, rtol=tol, atol=tol):
                    raise LabCheckError(
                        f"{name}: 0 breaks, but the {how} logits differ from the original's for input ids of shape "
                        f"{tuple(x.shape)} on the grading weights (allowed {tol:.0e}): "
                        + ("removing a break must not change what the model computes" if how == "eager" else
                           "the graph dynamo traces from your forward must compute what the forward computes eagerly"))
    _passed(name, f"0 graph breaks, logits equal to the original's on {len(pairs)} grading inputs, eager and as the "
                  "traced graph")


def _stops(rep: dict, name: str) -> bool:
    """A probe's verdict: True (and the check not done) for a stub; LabCheckError for a wrong model
    or breaks found; False to go on."""
    if rep.get("not_done"):
        _not_done(name)
        return True
    if rep.get("wrong"):
        raise LabCheckError(f"{name}: {rep['wrong']}")
    if rep.get("graph_breaks"):
        raise LabCheckError(f"{name}: torch._dynamo.explain still finds {rep['graph_breaks']} graph break(s):\n"
                            + "\n".join(f"  {b}" for b in rep.get("breaks", [])))
    return False


READABLE = ("perflab.compiler.models", __name__)  # torch._dynamo reads these sources while it traces
