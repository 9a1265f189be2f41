"""README's table of GPU-only code is current (tools/gpu_table.py --write regenerates it), and the
scan finds what it must: a function that refuses without CUDA, and the lines of a CUDA branch."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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
