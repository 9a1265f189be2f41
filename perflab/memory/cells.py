"""ipyexperiments' per-cell memory report in a notebook, set up to behave (lesson 03).

    >>> exp = cell_memory_experiment()          # each cell's CPU RSS (and GPU 'used') from now on
    >>> with pause_cell_logger(exp): ...        # around a timing: its sampler busy-loops on one core
    >>> finish_experiment(exp, keep=("model",))
"""

from __future__ import annotations

import contextlib
import os

from perflab.core.errors import UnsupportedError
from perflab.memory.usage import nvml_used_bytes


def cell_memory_experiment(*, cell_logger: bool = True, compact: bool = True, keep: tuple[str, ...] = ()):
    """Start an `ipyexperiments` experiment that reports each cell's memory (CPU RSS, and GPU
    'used' through NVML when there is a GPU), working around its traps:

    * the class is chosen by `torch.cuda.is_available()` (IPyExperimentsPytorch initialises NVML
      first and fails on a machine without it);
    * importing ipyexperiments sets CUDA_MODULE_LOADING=EAGER for the whole process; the previous
      value is put back, so lazy kernel loading stays as it was (measure it in a subprocess anyway);
    * `keep` names variables that `finish()` must not delete (it deletes every variable created
      since the start otherwise);
    * it needs an IPython kernel: outside one this raises UnsupportedError with a one-line reason.

    Use `pause_cell_logger(exp)` around timings: the cell logger samples memory in a busy loop on
    one core and slows benchmarks.
    """
    try:
        from IPython import get_ipython
    except ImportError as e:  # pragma: no cover
        raise UnsupportedError("ipyexperiments needs IPython: run this in Jupyter") from e
    ip = get_ipython()
    if ip is None or not hasattr(ip, "kernel"):
        raise UnsupportedError("ipyexperiments reports per-cell memory inside a Jupyter kernel only: run this in a notebook")
    import torch

    before = os.environ.get("CUDA_MODULE_LOADING")
    try:
        from perflab.core.extras import need

        ipyexperiments = need("ipyexperiments", "course", "the per-cell memory report")
    finally:
        if before is None:
            os.environ.pop("CUDA_MODULE_LOADING", None)
        else:
            os.environ["CUDA_MODULE_LOADING"] = before
    cls = ipyexperiments.IPyExperimentsCPU
    if torch.cuda.is_available() and nvml_used_bytes(torch.device("cuda", torch.cuda.current_device())) is not None:
        cls = ipyexperiments.IPyExperimentsPytorch
    exp = cls(cl_enable=cell_logger, cl_compact=compact)
    if keep:
        exp.keep_var_names(*keep)
    return exp


@contextlib.contextmanager
def pause_cell_logger(exp):
    """Stop ipyexperiments' per-cell sampler (a busy loop on one core) for the duration, e.g. of a
    timing, and start it again afterwards."""
    cl = getattr(exp, "cl", None)
    if cl is None:
        yield
        return
    cl.stop()
    exp.cl = None
    try:
        yield
    finally:
        from ipyexperiments.cell_logger import CellLogger

        exp.cl = CellLogger(exp=exp, **exp.cl_kwargs)
        exp.cl.start()


def finish_experiment(exp, keep: tuple[str, ...] = ()):
    """`exp.finish()` keeping the named variables; returns ipyexperiments' data (consumed and
    reclaimed bytes)."""
    if keep:
        exp.keep_var_names(*keep)
    return exp.finish()
