"""README's table of GPU-only code is current (tools/gpu_table.py --write regenerates it), and the
scan finds what it must: a function that refuses without CUDA, and the lines of a CUDA branch."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_table  # noqa: E402


def test_readme_gpu_table_is_current():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_table.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_scan_finds_guards_and_branches(tmp_path):
    pkg = tmp_path / "perflab"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "import torch\n"
        "def only():\n"
        "    '''doc'''\n"
        "    if not torch.cuda.is_available():\n"
        "        raise RuntimeError('no')\n"
        "    return 1\n"
        "def both(dev):\n"
        "    if dev.type == 'cuda':\n"
        "        torch.cuda.synchronize()\n"
        "    return 2\n"
        "def cpu():\n"
        "    return 3\n"
        "def elsewise(dev):\n"
        "    if dev.type != 'cuda':\n"
        "        return 0\n"
        "    else:\n"
        "        return torch.cuda.device_count()\n")
    found = {f.name: f for f in gpu_table.scan(pkg)}
    assert set(found) == {"only", "both", "elsewise"}
    assert found["only"].gpu_only and not found["both"].gpu_only and not found["elsewise"].gpu_only
    assert found["both"].branch_lines == {9}
    assert found["elsewise"].branch_lines == {17}
    assert 6 in found["only"].branch_lines


def test_scan_reads_early_returns_and_driver_names(tmp_path):
    pkg = tmp_path / "perflab"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "import torch\n"
        "def timed():\n"
        "    if not torch.cuda.is_available():\n"
        "        return 'needs a GPU'\n"
        "    torch.cuda.synchronize()\n"
        "    return 1\n"
        "def later(dev, xs):\n"
        "    total = sum(xs)\n"
        "    for x in xs:\n"
        "        total += x\n"
        "    total *= 2\n"
        "    total -= 1\n"
        "    if dev.type != 'cuda':\n"
        "        return total\n"
        "    torch.cuda.synchronize()\n"
        "    return total + 1\n"
        "def either(device):\n"
        "    if not torch.cuda.is_available() or device != 'cuda':\n"
        "        return 'no'\n"
        "    return torch.cuda.device_count()\n"
        "def nvml_count():\n"
        "    return 0\n"
        "def early_else(dev):\n"
        "    if dev.type != 'cuda':\n"
        "        x = 1\n"
        "    else:\n"
        "        return 2\n"
        "    return x\n")
    found = {f.name: f for f in gpu_table.scan(pkg)}
    assert found["timed"].gpu_only and found["timed"].branch_lines >= {5, 6}
    # the guard sits after four statements' worth of work: a CUDA branch, not a GPU-only function
    assert not found["later"].gpu_only and found["later"].branch_lines == {15, 16}
    assert found["nvml_count"].gpu_only
    assert found["either"].gpu_only and 20 in found["either"].branch_lines  # `no CUDA or ...: return` guards too
    # an `if` that does not leave the block guards nothing after it
    assert found["early_else"].branch_lines == {27}
