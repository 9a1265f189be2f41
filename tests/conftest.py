import os
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
warnings.filterwarnings("ignore", message="The pynvml package is deprecated", category=FutureWarning)

pytest_plugins = ["suite_clock"]  # tests/suite_clock.py: every test timed and reported, none failed for its time

# Two xdist workers on two cores: each worker's torch (and every process it starts: notebook
# kernels, CLI runs) gets one thread, or OpenMP threads of two workers spin against each other
# and everything runs several times slower. Set before torch is imported in the worker.
# Figures drawn in the test process go to Agg (no screen). Not through MPLBACKEND: the notebook
# kernels inherit the environment, and a kernel must draw its figures inline as a learner's does
# (with Agg a lesson's figures are never rendered, so a figure that fails to draw would pass).
import matplotlib  # noqa: E402

matplotlib.use("Agg")

if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


@pytest.fixture(scope="session")
def executed_dir(tmp_path_factory) -> Path:
    """Where the notebook tests write their executed copies ($PERFLAB_EXECUTED, else a folder of
    this worker's session): the site test, in the same xdist group and after them, builds its pages
    from those copies instead of executing the lessons again."""
    d = os.environ.get("PERFLAB_EXECUTED")
    p = Path(d) if d else tmp_path_factory.getbasetemp() / "executed"
    p.mkdir(parents=True, exist_ok=True)
    return p


@pytest.fixture(scope="session", autouse=True)
def _isolated_results(tmp_path_factory):
    """Every test run measures afresh: results go to a temporary folder, not the learner's."""
    old = os.environ.get("PERFLAB_RESULTS")
    os.environ["PERFLAB_RESULTS"] = str(tmp_path_factory.mktemp("results"))
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    yield
    if old is None:
        os.environ.pop("PERFLAB_RESULTS", None)
    else:
        os.environ["PERFLAB_RESULTS"] = old


@pytest.fixture(autouse=True)
def _fresh_grading_and_figures():
    """Every test starts with no recorded lab checks and leaves no open figure (a lab's checks record
    their verdicts in one module-level table; a test must not read another's)."""
    from perflab.grading import checks as grading

    grading.reset()
    yield
    grading.reset()
    import matplotlib.pyplot as plt

    plt.close("all")


def has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    # Under pytest-xdist (`make test`: -n 2 --dist loadgroup) the notebook runs go first, in two
    # groups, each on one worker one after the other: the lessons (the longest runs, each timed
    # against its smoke-mode budget) on one, the labs and their solutions on the other, so that two
    # lessons never race for two cores; the unit tests fill both workers afterwards.
    def group(it) -> str:
        return "labs" if "[labs/" in it.nodeid or "[solutions/" in it.nodeid else "lessons"

    nb = [it for it in items if "notebooks" in it.keywords]
    for it in nb:
        it.add_marker(pytest.mark.xdist_group(group(it)))
    nb.sort(key=lambda it: group(it) != "lessons")  # stable: each group keeps the course's order
    # Then the longest first, so that neither worker idles at the end waiting for the other's last
    # long test: the tests marked `slow` (over a few seconds), then the rest, each in collection order.
    rest = [it for it in items if "notebooks" not in it.keywords]
    rest.sort(key=lambda it: "slow" not in it.keywords)
    items[:] = nb + rest
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none here): run `make test-gpu` on a GPU box")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def watch_all_cores(monkeypatch):
    """Watches count every core this process may run on as the measurement's, whatever torch's thread
    count (one per xdist worker): the made-up loads of these tests say what share of *all* cores others
    take."""
    from perflab.core import quietness

    monkeypatch.setattr(quietness, "_compute_threads", lambda n: n)
