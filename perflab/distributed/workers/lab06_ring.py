"""Run a learner's ring all-reduce on every rank and compare it with `dist.all_reduce` (lab 06).

    torchrun --nproc-per-node 4 -m perflab.distributed.workers.lab06_ring --file their_code.py --name ring_all_reduce

The learner's function `fn(x, rank, world_size) -> tensor` is loaded from --file. While it runs,
point-to-point sends are counted (bytes this rank sent) and any call to a collective is counted
too: a ring built from `all_reduce` is not a ring.

This is the notebook's tutor: the counts are taken inside the learner's own ranks, where its code
could rewrite them. `perflab grade` never reads them: its judge runs the ring on ranks that talk
only through the judge's process, which counts and compares there (perflab/classroom/ranks.py).
"""

from __future__ import annotations

import contextlib
import importlib.util

from perflab.core.jsonable import JSON

COLLECTIVES = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_single",
               "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all", "all_to_all_single",
               "gather", "scatter")


@contextlib.contextmanager
def watch_communication():
    """Count bytes sent point-to-point (send, isend, batch_isend_irecv) and calls to collectives."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    seen = {"bytes_sent": 0, "sends": 0, "collectives": []}
    saved = []

    def patch(module, name, new):
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, new)

    for name in ("send", "isend"):
        original = getattr(c10d, name)

        def counting(tensor, *args, _original=original, **kwargs):
            seen["bytes_sent"] += tensor.numel() * tensor.element_size()
            seen["sends"] += 1
            return _original(tensor, *args, **kwargs)

        # both names: P2POp checks `op is isend` against the module's own global
        patch(c10d, name, counting)
        patch(dist, name, counting)
    for name in COLLECTIVES:
        for module in (dist, c10d):  # `dist.all_reduce` and `distributed_c10d.all_reduce` alike
            if not hasattr(module, name):
                continue
            original = getattr(module, name)

            def noting(*args, _original=original, _name=name, **kwargs):
                seen["collectives"].append(_name)
                return _original(*args, **kwargs)

            patch(module, name, noting)
    try:
        yield seen
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)


def disarm_answers() -> None:
    """perflab's own ring (and the helpers that compute its schedule and traffic) stop the rank when
    the learner's code calls them: a ring taken from perflab is not the learner's."""
    from perflab.distributed import ring

    def refused(*args, **kwargs):
        raise SystemExit("perflab's ring was called: write the ring yourself")

    for name in RING_ANSWERS:
        fn = getattr(ring, name, None)
        if fn is not None and not fn.__code__.co_freevars:
            fn.__code__ = refused.__code__.replace(co_name=fn.__code__.co_name)


RING_ANSWERS = ("ring_all_reduce", "simulate_ring", "ring_schedule", "chunk_sizes", "check_ring")


def load(path: str, name: str):
    """The learner's function `name` from the file `path`, perflab's own ring disarmed before it runs."""
    spec = importlib.util.spec_from_file_location("lab06_student", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a Python module")
    disarm_answers()
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def body(ctx, a) -> JSON:
    """This rank's rows, one per size, as its result file holds them (read by `perflab.distributed.lab06`)."""
    import torch
    import torch.distributed as dist

    fn = load(a.file, a.name)
    rows = []
    for numel in [int(s) for s in a.numels.split(",") if s]:
        ctx.step(f"ring_all_reduce of {numel} elements")
        g = torch.Generator().manual_seed(1234 + 97 * ctx.rank + numel)
        x = torch.randn(numel, generator=g).to(ctx.device)
        ref = x.clone()
        dist.all_reduce(ref)
        with watch_communication() as seen:
            out = fn(x.clone(), ctx.rank, ctx.world_size)
        row = {"numel": numel, "bytes_sent": seen["bytes_sent"], "sends": seen["sends"],
               "collectives": seen["collectives"], "returned": type(out).__name__}
        if isinstance(out, torch.Tensor) and out.shape == ref.shape:
            err = float((out.to(ref.dtype) - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
            row.update(max_rel_error=err, shape_ok=True)
        else:
            row.update(max_rel_error=None, shape_ok=False,
                       shape=list(out.shape) if isinstance(out, torch.Tensor) else None)
        rows.append(row)
    return {"rank": ctx.rank, "world_size": ctx.world_size, "rows": rows}


def arguments(p) -> None:
    p.add_argument("--file", required=True, help="a .py file that defines the function")
    p.add_argument("--name", default="ring_all_reduce")
    p.add_argument("--numels", default="4096,1000")


def main(argv: list[str] | None = None) -> None:
    from perflab.distributed.workers import runtime

    runtime.main("perflab.distributed.workers.lab06_ring", arguments, body, argv)


if __name__ == "__main__":
    main()
