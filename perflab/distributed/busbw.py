"""Bandwidth of a collective, the way nccl-tests reports it: algbw and busbw.

    >>> c = convert("all_reduce", nbytes=2**30, seconds=0.01, ranks=8)
    >>> c.algbw_gbps, c.busbw_gbps, c.factor
    (107.37..., 187.9..., 1.75)

* **algbw** = S / t: the size of the operation divided by its time (GB/s, 1 GB = 1e9 bytes).
* **busbw** = algbw × factor(op, n): what each rank's link must have carried per second. It does
  not change with the number of ranks for an ideal algorithm, so it can be compared with the
  hardware's link bandwidth (NVLink, PCIe, network) whatever n is.

The factors and the meaning of S come from nccl-tests (doc/PERFORMANCE.md and each test's
`GetBw` in src/*.cu): all-reduce 2(n−1)/n; reduce-scatter, all-gather, all-to-all, gather,
scatter (n−1)/n; broadcast, reduce, send/recv 1. S is the size nccl-tests prints in its "size"
column: for all-reduce, broadcast and reduce the buffer each rank holds; for all-gather and gather
the gathered output (n × what each rank sends); for reduce-scatter and scatter the full input
(n × what each rank receives); for all-to-all what each rank sends in total.

`measure_sweep` times a collective over a range of sizes with `torchrun` ranks (gloo on CPUs,
NCCL on GPUs) and records each point in the results folder as it goes (a re-run resumes).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflab.core.errors import InputError
from perflab.core.jsonable import JSON
from perflab.core.readout import binary_bytes

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "gather", "scatter",
       "send_recv")

# (factor as a function of n, how nccl-tests' S relates to the buffers) — see module docstring
_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}
FACTOR_TEXT = {"all_reduce": "2(n−1)/n", "reduce_scatter": "(n−1)/n", "all_gather": "(n−1)/n",
               "all_to_all": "(n−1)/n", "gather": "(n−1)/n", "scatter": "(n−1)/n", "broadcast": "1",
               "reduce": "1", "send_recv": "1"}
SIZE_MEANING = {
    "all_reduce": "bytes of the buffer each rank holds (input = output)",
    "broadcast": "bytes of the buffer",
    "reduce": "bytes of the buffer",
    "all_gather": "bytes of the gathered output on each rank (n × what each rank sends)",
    "gather": "bytes of the gathered output on the root (n × what each rank sends)",
    "reduce_scatter": "bytes of each rank's full input (n × what each rank receives)",
    "scatter": "bytes of the root's full input (n × what each rank receives)",
    "all_to_all": "bytes each rank sends in total (n chunks, one per rank)",
    "send_recv": "bytes each rank sends to its neighbour",
}
# ops whose S must split into n equal chunks
_CHUNKED = ("all_gather", "gather", "reduce_scatter", "scatter", "all_to_all")

_ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
            "alltoall": "all_to_all", "sendrecv": "send_recv", "bcast": "broadcast", "p2p": "send_recv"}


def normalize_op(name: str) -> str:
    """'AllReduce', 'all-reduce', 'allreduce' → 'all_reduce' (InputError for anything else)."""
    key = str(name).strip().lower().replace("-", "_").replace(" ", "_")
    if key in OPS:
        return key
    flat = key.replace("_", "")
    if flat in _ALIASES:
        return _ALIASES[flat]
    for op in OPS:
        if op.replace("_", "") == flat:
            return op
    raise InputError(f"unknown collective {name!r}: use one of {', '.join(OPS)}")


def _ranks(n) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, float)) or n != int(n) or n < 1:
        raise InputError(f"ranks must be a whole number ≥ 1 (got {n!r})")
    n = int(n)
    if n < 2:
        raise InputError("a collective needs at least 2 ranks: use ranks ≥ 2")
    return n


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' correction from algbw to busbw for `op` on n ranks."""
    return _FACTOR[normalize_op(op)](_ranks(n))


def algbw_gbps(nbytes: float, seconds: float) -> float:
    """S / t in GB/s (1 GB = 1e9 bytes)."""
    if not nbytes > 0:
        raise InputError(f"bytes must be > 0 (got {nbytes})")
    if not seconds > 0 or math.isinf(seconds):
        raise InputError(f"seconds must be a positive time (got {seconds})")
    return nbytes / seconds / 1e9


def busbw_gbps(op: str, nbytes: float, seconds: float, n: int) -> float:
    """algbw × factor(op, n), in GB/s: comparable with a link's bandwidth whatever n is."""
    return algbw_gbps(nbytes, seconds) * bus_factor(op, n)


@dataclass(frozen=True)
class Conversion:
    """One measurement of a collective in nccl-tests' terms: S = `bytes` (what `size_means` says) in
    `seconds` on `ranks` ranks; algbw = S/t and busbw = algbw × factor, in GB/s (1 GB = 1e9 B)."""

    op: str
    bytes: float
    seconds: float
    ranks: int
    factor: float
    factor_formula: str  # the factor as a formula of n: '2(n−1)/n'
    algbw_gbps: float
    busbw_gbps: float
    size_means: str

    def text(self) -> str:
        """One line for a person (what `perflab busbw --bytes --seconds --ranks` prints)."""
        return (f"{self.op} of S = {self.bytes} B in {self.seconds:g} s on {self.ranks} ranks: "
                f"algbw = S/t = {self.algbw_gbps:.4g} GB/s; busbw = algbw × {self.factor_formula} "
                f"({self.factor:.4g}) = {self.busbw_gbps:.4g} GB/s")


def convert(op: str, nbytes: float, seconds: float, ranks: int) -> Conversion:
    """algbw and busbw of one measurement (what `perflab busbw --bytes --seconds --ranks` prints)."""
    op = normalize_op(op)
    n = _ranks(ranks)
    alg = algbw_gbps(nbytes, seconds)
    f = bus_factor(op, n)
    return Conversion(op, nbytes, seconds, n, f, FACTOR_TEXT[op], alg, alg * f, SIZE_MEANING[op])


def factor_table(ns=(2, 4, 8, 16, 64)):
    """The factor of every op for a few n, as a DataFrame (rows: ops)."""
    import pandas as pd

    rows = [{"op": op, "factor": FACTOR_TEXT[op], **{f"n={n}": round(bus_factor(op, n), 4) for n in ns},
             "S means": SIZE_MEANING[op]} for op in OPS]
    return pd.DataFrame(rows).set_index("op")


# ----------------------------------------------------------------------------- sizes
_SUFFIX = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20, "mib": 2**20,
           "g": 2**30, "gb": 2**30, "gib": 2**30}


def parse_size(text: str | int) -> int:
    """'64K' → 65536, '1M' → 1048576 (binary suffixes, as nccl-tests' -b/-e), '4096' → 4096."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        s = str(text).strip().lower().replace("_", "")
        num = s.rstrip("kmgibB")
        suffix = s[len(num):]
        if suffix not in _SUFFIX or not num:
            raise InputError(f"size {text!r} not understood: write bytes like 4096, 64K, 1M or 1G")
        try:
            value = float(num) * _SUFFIX[suffix]
        except ValueError:
            raise InputError(f"size {text!r} not understood: write bytes like 4096, 64K, 1M or 1G") from None
        if not value.is_integer():
            raise InputError(f"size {text!r} is not a whole number of bytes")
        value = int(value)
    if value < 1:
        raise InputError(f"size must be ≥ 1 byte (got {value})")
    return value


def check_size(op: str, nbytes: int, n: int, itemsize: int = 4, maximum: int = 2**34) -> int:
    """S must be whole elements, split evenly into n chunks where the op splits it; else one line that says what to use."""
    op = normalize_op(op)
    if nbytes > maximum:
        raise InputError(f"size {nbytes} B is larger than the limit {maximum} B: choose a smaller size")
    unit = itemsize * (n if op in _CHUNKED else 1)
    if nbytes % unit:
        lo = nbytes - nbytes % unit
        hi = lo + unit
        what = f"{n} ranks × {itemsize} B" if op in _CHUNKED else f"{itemsize} B"
        near = f"{lo} or {hi}" if lo else f"{hi}"
        raise InputError(f"size {nbytes} B for {op} must be a multiple of {what} = {unit} B: try {near}")
    return nbytes


def default_sizes(op: str, n: int, *, smallest: int = 2**10, largest: int = 2**26, step: int = 4,
                  itemsize: int = 4) -> list[int]:
    """Sizes from `smallest` to `largest` (×step each), each rounded down to what `op` on n ranks accepts."""
    unit = itemsize * (n if normalize_op(op) in _CHUNKED else 1)
    out, s = [], smallest
    while s <= largest:
        v = max(unit, s - s % unit)
        if v not in out:
            out.append(v)
        s *= step
    return out


def size_label(n: float) -> str:
    """A message size as nccl-tests and the plots label it: '256 KiB', '3 MiB', '512 B'."""
    return binary_bytes(n, decimal_too=False)


# ----------------------------------------------------------------------------- inside a rank
def make_op(op: str, nbytes: int, n: int, rank: int, device, dtype=None):
    """Buffers and a closure for one collective of size S = nbytes, plus a correctness check.

    Returns (run, check): run() issues the collective once; check() runs it on known data and
    says whether every element came out as it must.
    """
    import torch
    import torch.distributed as dist

    dtype = dtype or torch.float32
    item = torch.tensor([], dtype=dtype).element_size()
    count = nbytes // item
    op = normalize_op(op)
    all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    tri = n * (n + 1) / 2

    def full(numel, value=0.0):
        return torch.full((numel,), float(value), dtype=dtype, device=device)

    if op in ("all_reduce", "broadcast", "reduce"):
        x = full(count)

        def run():
            if op == "all_reduce":
                dist.all_reduce(x)
            elif op == "broadcast":
                dist.broadcast(x, src=0)
            else:
                dist.reduce(x, dst=0)

        def check():
            x.fill_(7.0 if op == "broadcast" and rank == 0 else rank + 1.0)
            run()
            want = 7.0 if op == "broadcast" else tri
            ok = True if (op == "reduce" and rank != 0) else bool((x == want).all())
            x.zero_()
            return ok
        return run, check
    if op in ("all_gather", "gather"):
        per = count // n
        x, out = full(per), full(per * n)
        outs = list(out.chunk(n))

        def run():
            if op == "all_gather":
                all_gather_single(out, x)
            else:
                dist.gather(x, outs if rank == 0 else None, dst=0)

        def check():
            x.fill_(rank + 1.0)
            run()
            want = torch.arange(1, n + 1, dtype=dtype, device=device).repeat_interleave(per)
            ok = True if (op == "gather" and rank != 0) else bool(torch.equal(out, want))
            out.zero_()
            return ok
        return run, check
    if op in ("reduce_scatter", "scatter"):
        per = count // n
        x, out = full(per * n), full(per)
        ins = list(x.chunk(n))

        def run():
            if op == "reduce_scatter":
                reduce_scatter_single(out, x)
            else:
                dist.scatter(out, ins if rank == 0 else None, src=0)

        def check():
            if op == "reduce_scatter":
                x.fill_(rank + 1.0)
            else:
                x.copy_(torch.arange(1, n + 1, dtype=dtype, device=device).repeat_interleave(per))
            run()
            want = tri if op == "reduce_scatter" else rank + 1.0
            ok = bool((out == want).all())
            x.zero_()
            out.zero_()
            return ok
        return run, check
    if op == "all_to_all":
        per = count // n
        x, out = full(per * n), full(per * n)

        def run():
            dist.all_to_all_single(out, x)

        def check():
            x.copy_((rank * n + torch.arange(n, dtype=dtype, device=device)).repeat_interleave(per))
            run()
            want = (torch.arange(n, dtype=dtype, device=device) * n + rank).repeat_interleave(per)
            ok = bool(torch.equal(out, want))
            x.zero_()
            return ok
        return run, check
    # send_recv, the one op left: normalize_op returns only names in OPS
    x, out = full(count), full(count)
    right, left = (rank + 1) % n, (rank - 1) % n

    def run():
        ops = [dist.P2POp(dist.isend, x, right), dist.P2POp(dist.irecv, out, left)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()

    def check():
        x.fill_(rank + 1.0)
        run()
        ok = bool((out == left + 1.0).all())
        x.zero_()
        return ok
    return run, check


def time_op(run, device, *, budget_s: float = 0.2, warmup: int = 2, max_iters: int = 200) -> tuple[float, int]:
    """Seconds per call of `run` (the slowest rank's mean over a timed loop) and the number of calls.

    All ranks agree on the number of iterations (the largest estimate wins), start together after
    a barrier, and report the slowest rank's time: a collective is done when its last rank is.
    """
    import torch
    import torch.distributed as dist

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        run()
    sync()
    t0 = time.perf_counter()
    run()
    sync()
    est = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
    dist.all_reduce(est, op=dist.ReduceOp.MAX)
    iters = int(min(max_iters, max(3, math.ceil(budget_s / max(float(est.item()), 1e-6)))))
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        run()
    sync()
    per = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=device)
    dist.all_reduce(per, op=dist.ReduceOp.MAX)
    return float(per.item()), iters


# ----------------------------------------------------------------------------- from the launcher
@dataclass
class BusbwRun:
    """A measured sweep: the rows (one per size) and the torchrun job that measured them."""

    op: str
    nproc: int
    backend: str
    rows: list[dict[str, Any]]
    launch: Any = None  # perflab.distributed.torchrun.LaunchResult (None when every point was already recorded)
    sweep: Any = None  # perflab.core.results.SweepResult when recorded in the results folder

    @property
    def frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows)

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.get("status", "ok") == "ok" and r.get("correct", True) for r in self.rows)

    def report(self) -> str:
        """One line per size that was not measured, and the job's report if it failed."""
        bad = [f"{r['bytes']} B: {r.get('status')} ({r.get('reason')})" for r in self.rows if r.get("status", "ok") != "ok"]
        text = "\n".join(bad)
        if self.launch is not None and not self.launch.ok:
            text += ("\n" if text else "") + self.launch.report()
        return text or "every size measured"

    @property
    def best(self) -> dict[str, Any] | None:
        """The measured size with the highest busbw (its row), or None when no size was measured."""
        ok = [r for r in self.rows if r.get("status", "ok") == "ok" and r.get("busbw_gbps") is not None]
        return max(ok, key=lambda r: r["busbw_gbps"], default=None)

    @property
    def best_busbw_gbps(self) -> float | None:
        b = self.best
        return None if b is None else float(b["busbw_gbps"])

    def best_text(self) -> dict[str, str] | None:
        """The best busbw as `perflab.course.gpu_figures.show` takes a measurement (None: nothing measured)."""
        from perflab.core.readout import num

        b = self.best_busbw_gbps
        return None if b is None else {f"{self.op}, {self.nproc} ranks, {self.backend}, best": f"{num(b)} GB/s"}

    def table(self):
        """One row per message size: S (binary units), the time per call, algbw and busbw in GB/s, or why
        the size was not measured."""
        import pandas as pd

        from perflab.core.readout import num, seconds

        rows = []
        for r in self.rows:
            ok = r.get("status", "ok") == "ok"
            rows.append({"S": size_label(r["bytes"]), "status": "ok" if ok else f"{r.get('status')}: {r.get('reason')}",
                         "time per call": seconds(r["seconds"]) if ok else "–",
                         "algbw (GB/s)": num(r["algbw_gbps"]) if ok else "–",
                         "busbw (GB/s)": num(r["busbw_gbps"]) if ok else "–"})
        return pd.DataFrame(rows).set_index("S")

    def figure(self, title: str = ""):
        """algbw and busbw against the message size (`plot`)."""
        return plot(self.rows, title=title)

    def as_dict(self) -> JSON:
        """What `perflab busbw --json` prints for a measured sweep."""
        return {"op": self.op, "nproc": self.nproc, "backend": self.backend, "factor": bus_factor(self.op, self.nproc),
                "factor_formula": FACTOR_TEXT[self.op], "size_means": SIZE_MEANING[self.op],
                "ok": self.ok,
                "rows": self.rows, "message": self.launch.message if self.launch is not None else "already measured"}


def _measure_launch(op: str, nproc: int, sizes: list[int], backend: str | None, timeout: float | None,
                    budget_s: float) -> tuple[dict[int, dict], Any]:
    from perflab.distributed.torchrun import launch

    with tempfile.TemporaryDirectory(prefix="perflab-busbw-") as tmp:
        out = Path(tmp) / "rows.jsonl"
        args = ["--op", op, "--sizes", ",".join(map(str, sizes)), "--budget-s", str(budget_s), "--out", str(out)]
        if timeout is None:
            timeout = 60.0 + len(sizes) * (budget_s * 4 + 2.0)
        res = launch("perflab.distributed.workers.busbw", nproc, args, timeout=timeout, backend=backend)
        rows: dict[int, dict] = {}
        if out.exists():
            for line in out.read_text().splitlines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                rows[int(r["bytes"])] = r
    return rows, res


def measure(op: str, nproc: int, sizes: list[int] | None = None, *, backend: str | None = None,
            timeout: float | None = None, budget_s: float = 0.2) -> BusbwRun:
    """Time `op` at every size in one torchrun job (no results file): what the CLI does."""
    from perflab.distributed.torchrun import DistRunError, choose_backend

    op = normalize_op(op)
    choice = choose_backend(nproc, backend)
    sizes = [check_size(op, parse_size(s), nproc) for s in (sizes or default_sizes(op, nproc))]
    got, res = _measure_launch(op, nproc, sizes, choice.name, timeout, budget_s)
    if not res.ok and not got:
        raise DistRunError(res.report(), res)
    rows = [got[s] if s in got else {"bytes": s, "status": "error", "reason": res.message} for s in sizes]
    return BusbwRun(op, nproc, choice.name, rows, launch=res)


def measure_sweep(op: str, nproc: int, sizes: list[int] | None = None, *, backend: str | None = None,
                  name: str | None = None, timeout: float | None = None, budget_s: float = 0.2,
                  progress: bool = True, retry_failed: bool = False) -> BusbwRun:
    """Like `measure`, but every point goes to the results folder (perflab.core.results) and a re-run resumes.

    Only the sizes not yet recorded are measured, all in one torchrun job (starting ranks costs
    seconds); the rows are appended as the job reports them. A size the job did not reach is
    recorded as an error with the job's one-line report, and (as in `run_sweep`) is only measured
    again with `retry_failed=True`.
    """
    from perflab.core.results import load_rows, point_key, run_sweep, sweep_path
    from perflab.distributed.torchrun import choose_backend

    op = normalize_op(op)
    choice = choose_backend(nproc, backend)
    sizes = [check_size(op, parse_size(s), nproc) for s in (sizes or default_sizes(op, nproc))]
    name = name or f"busbw_{op}_{nproc}ranks_{choice.name}"
    points = [{"op": op, "nproc": nproc, "backend": choice.name, "bytes": s} for s in sizes]
    path = sweep_path(name)
    done = {point_key(r["params"]) for r in load_rows(path) if retry_failed is False or r.get("status") == "ok"}
    todo = [p["bytes"] for p in points if point_key(p) not in done]
    got: dict[int, dict] = {}
    res = None
    if todo:
        got, res = _measure_launch(op, nproc, todo, choice.name, timeout, budget_s)

    def one(p):
        row = got.get(p["bytes"])
        if row is None:
            raise RuntimeError(f"not measured: {res.message if res is not None else 'no job ran'}")
        if not row.get("correct", True):
            from perflab.core.errors import CorrectnessError

            raise CorrectnessError(f"{op} of {p['bytes']} B gave a wrong result on some rank")
        return {k: v for k, v in row.items() if k != "bytes"}

    sweep = run_sweep(name, points, one, path=path, progress=progress, retry_failed=retry_failed)
    rows = []
    for r in sweep.rows:
        flat = {**r.get("params", {}), **{k: v for k, v in r.items() if k != "params"}}
        rows.append(flat)
    return BusbwRun(op, nproc, choice.name, rows, launch=res, sweep=sweep)


def plot(rows, *, title: str = "", link_gbps: float | None = None, link_label: str = "link", ax=None):
    """algbw and busbw (GB/s) against message size S (bytes, log scale)."""
    import matplotlib.pyplot as plt
    import pandas as pd
    from matplotlib.ticker import FuncFormatter

    df = pd.DataFrame(rows)
    if "status" in df:
        df = df[df["status"] == "ok"]
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 4))
    else:
        fig = ax.figure
    for col, style, label in (("algbw_gbps", "o--", "algbw = S / t"), ("busbw_gbps", "s-", "busbw = algbw × factor")):
        if col in df:
            ax.plot(df["bytes"], df[col], style, label=label)
    if link_gbps:
        ax.axhline(link_gbps, color="tab:red", linestyle=":", label=f"{link_label}: {link_gbps:g} GB/s")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: size_label(v)))
    ax.set_xlabel("message size S (bytes, as nccl-tests counts it)")
    ax.set_ylabel("bandwidth (GB/s, 1 GB = 1e9 B)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig
