"""Execute a notebook with papermill, top to bottom, once or twice in one kernel.

`make test` runs each notebook once. `make test-all` sets PERFLAB_NOTEBOOK_PASSES=2: the second
pass, in the same kernel, proves every cell can be re-run (a learner's habit). papermill's
parameter injection is what a headless user gets. Registered as papermill engine 'twice'.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from queue import Empty

import papermill as pm
from nbclient.exceptions import CellExecutionError
from nbclient.util import ensure_async
from papermill.clientwrap import PapermillNotebookClient
from papermill.engines import NBClientEngine, papermill_engines
from papermill.utils import merge_kwargs, remove_args

ROOT = Path(__file__).resolve().parents[1]


class TwiceClient(PapermillNotebookClient):
    passes = 2

    async def _async_poll_for_reply(self, msg_id, cell, timeout, *args, **kwargs):
        # nbclient waits for a cell's execute_reply with one get_msg(timeout=<cell timeout>). With
        # ipykernel 7.4 / nbclient 0.11 / pyzmq 27 that single long poll sometimes never wakes
        # although the reply has arrived (the kernel is idle), mostly after cells that send many
        # widget messages (jupyter/nbclient#312). Waiting in 1 s slices finds the reply at the
        # next slice.
        channel = self.kc.shell_channel
        original = channel.get_msg

        async def sliced(timeout=None):
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                left = 1.0 if deadline is None else min(1.0, max(0.0, deadline - time.monotonic()))
                try:
                    return await ensure_async(original(timeout=left))
                except Empty:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise

        channel.get_msg = sliced
        try:
            return await super()._async_poll_for_reply(msg_id, cell, timeout, *args, **kwargs)
        finally:
            channel.get_msg = original

    def papermill_execute_cells(self):
        for _ in range(self.passes):
            for index, cell in enumerate(self.nb.cells):
                try:
                    self.nb_man.cell_start(cell, index)
                    self.execute_cell(cell, index)
                except CellExecutionError as ex:
                    self.nb_man.cell_exception(self.nb.cells[index], cell_index=index, exception=ex)
                    return
                finally:
                    self.nb_man.cell_complete(self.nb.cells[index], cell_index=index)


class TwiceEngine(NBClientEngine):
    @classmethod
    def execute_managed_notebook(cls, nb_man, kernel_name, log_output=False, stdout_file=None, stderr_file=None,
                                 start_timeout=60, execution_timeout=None, **kwargs):
        import logging

        kwargs = remove_args(["input_path"], **kwargs)
        safe = remove_args(["timeout", "startup_timeout"], **kwargs)
        final = merge_kwargs(safe, timeout=execution_timeout or kwargs.get("timeout"), startup_timeout=start_timeout,
                             kernel_name=kernel_name, log=logging.getLogger("papermill"), log_output=log_output,
                             stdout_file=stdout_file, stderr_file=stderr_file)
        return TwiceClient(nb_man, **final).execute()


papermill_engines.register("twice", TwiceEngine)


def passes() -> int:
    """How many times `make test` runs each notebook top to bottom in one kernel: 1, or 2 under
    `make test-all` (PERFLAB_NOTEBOOK_PASSES=2)."""
    return 2 if os.environ.get("PERFLAB_NOTEBOOK_PASSES", "1").strip() == "2" else 1


def run_notebook(path: Path, out_dir: Path, parameters: dict | None = None, *, twice: bool | None = None,
                 timeout: int = 600) -> tuple[dict, float]:
    """Execute `path` (cwd = its folder) with `parameters`; return (executed notebook, seconds).
    `twice` (default: PERFLAB_NOTEBOOK_PASSES=2) runs it top to bottom a second time in the same kernel."""
    if twice is None:
        twice = passes() == 2
    out = out_dir / (path.parent.name + "__" + path.name)
    t0 = time.perf_counter()
    nb = pm.execute_notebook(
        str(path), str(out), parameters=parameters or {"smoke": True}, kernel_name="python3",
        engine_name="twice" if twice else None, cwd=str(path.parent), execution_timeout=timeout,
        progress_bar=False, request_save_on_cell_execute=False,
    )
    return nb, time.perf_counter() - t0


def all_notebooks() -> list[Path]:
    found = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "labs").glob("*.ipynb")) \
        + sorted((ROOT / "labs" / "solutions").glob("*.ipynb"))
    return [p for p in found if ".ipynb_checkpoints" not in p.parts]


def kernel_env_ok() -> None:
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
