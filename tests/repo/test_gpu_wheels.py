"""The wheels for an offline GPU box (tools/gpu_wheels.py, `make gpu-wheels`): which of the downloaded
wheels it keeps. Downloading needs a package index, which a test must not: the rules run on file
names made here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_wheels", ROOT / "tools" / "gpu_wheels.py")
assert spec is not None and spec.loader is not None
gpu_wheels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_wheels)


def test_names_compare_as_pip_compares_them():
    assert gpu_wheels.canonical("Typing_Extensions") == "typing-extensions"
    assert gpu_wheels.canonical("nvidia.ml__py") == "nvidia-ml-py"
    assert gpu_wheels.wheel_name(Path("python_dateutil-4.0.0-py3-none-any.whl")) == "python-dateutil"


def test_a_freeze_list_gives_the_names_the_box_has():
    text = "# comment\ntorch==2.11.0+cu130\nnvidia_ml_py==13.0\n-e git+https://x/y#egg=z\nmypkg @ file:///tmp/m.whl\n\n"
    assert gpu_wheels.freeze_names(text) == {"torch", "nvidia-ml-py", "mypkg"}


def test_what_the_box_has_torch_and_the_shim_are_deleted(tmp_path):
    for name in ("papermill-2.7.0-py3-none-any.whl", "psutil-7.2.2-cp36-abi3-manylinux2010_x86_64.whl",
                 "pynvml-13.0.1-py3-none-any.whl", "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl",
                 "ipykernel-7.4.0-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    gone = gpu_wheels.prune(tmp_path, {"psutil"})
    assert sorted(gone) == ["psutil", "pynvml", "torch"]
    assert sorted(p.name.split("-")[0] for p in tmp_path.glob("*.whl")) == ["ipykernel", "papermill"]


def test_the_box_list_holds_the_notebook_packages_apart():
    box = {gpu_wheels.canonical(b) for b in gpu_wheels.BOX}
    assert "torch" in box and not box & {gpu_wheels.canonical(n) for n in gpu_wheels.NEEDED}
    assert gpu_wheels.main(["--python", "three"]) == 2
