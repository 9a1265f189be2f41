import os
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
warnings.filterwarnings("ignore", message="The pynvml package is deprecated", category=FutureWarning)

pytest_plugins = ["time_limit"]  # tests/time_limit.py: no test may take more than 60 s


@pytest.fixture(scope="session", autouse=True)
def _isolated_results(tmp_path_factory):
    """Every test run measures afresh: results go to a temporary folder, not the learner's."""
    old = os.environ.get("PERFLAB_RESULTS")
    os.environ["PERFLAB_RESULTS"] = str(tmp_path_factory.mktemp("results"))
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    os.environ.setdefault("MPLBACKEND", "Agg")
    yield
    if old is None:
        os.environ.pop("PERFLAB_RESULTS", None)
    else:
        os.environ["PERFLAB_RESULTS"] = old


def has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def pytest_collection_modifyitems(config, items):
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none here): run `make test-gpu` on a GPU box")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
