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

import torch

from perflab.compiler import breaks, models, parity
from perflab.core.grading import LabCheckError, record

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


def _not_done(name: str) -> bool:
    record(name, False)
    print(f"… {name}: not done yet — fill in the function and run this cell again.")
    return False


def _passed(name: str, what: str) -> bool:
    record(name, True)
    print(f"✓ {name}: {what}")
    return True


def check_rope(student: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> bool:
    """`student(x, angles)` must equal `models.rope_complex(x, angles)` within the fp32 tolerance."""
    name, tol = "rope_real", tolerance()
    g = torch.Generator().manual_seed(SEED)
    for shape in ((2, 2, 8, 16), (1, 3, 5, 4)):
        x = torch.randn(*shape, generator=g)
        angles = models.rope_angles(shape[-2], shape[-1])
        try:
            got = student(x, angles)
        except NotImplementedError:
            return _not_done(name)
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
    return _passed(name, "equal to the complex-number RoPE on 2 cases")


def check_model(model_cls: Callable[..., torch.nn.Module]) -> bool:
    """`model_cls(**DIMS)` with BrokenLM's weights: 0 graph breaks and the same logits."""
    name, tol = "no graph breaks", tolerance()
    original = given_model()
    original.verbose = False  # the original's print is a break of its own, not output
    try:
        mine = model_cls(**DIMS)
    except NotImplementedError:
        return _not_done(name)
    except TypeError as exc:
        raise LabCheckError(f"{name}: {getattr(model_cls, '__name__', model_cls)}(**{DIMS}) failed ({exc}); "
                            "subclass BrokenLM and keep its constructor") from None
    try:
        mine.load_state_dict(original.state_dict())
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise LabCheckError(f"{name}: your model must have BrokenLM's parameters ({first[0] if first else exc}); "
                            "change the forward, not the layers") from None
    if hasattr(mine, "verbose"):
        mine.verbose = True  # pyright: ignore[reportArgumentType]  # a plain flag; Module.__setattr__'s stub names only tensors and modules
        # as the given model: a print kept under `if self.verbose` is still a break
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
    return _passed(name, f"0 graph breaks, logits equal to the original's within {tol:.0e} on {len(xs)} inputs")
