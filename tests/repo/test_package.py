"""Importing perflab is cheap and side-effect free; every package is reachable as perflab.<name>."""

import subprocess
import sys
from pathlib import Path

import perflab

PKG = Path(perflab.__file__).parent


def test_every_package_is_a_lazy_attribute():
    pkgs = {p.parent.name for p in PKG.glob("*/__init__.py")} | {"cli"}
    assert pkgs <= set(perflab.PACKAGES)
    assert perflab.core.timing.__name__ == "perflab.core.timing"


def test_import_does_not_import_torch_or_change_state():
    code = ("import sys, os; before = dict(os.environ); import perflab; "
            "assert 'torch' not in sys.modules, 'import perflab imported torch'; "
            "assert dict(os.environ) == before")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_building_the_cli_does_not_import_torch():
    # Every command registers its flags at start-up; a command that needs no tensors (shuffle, ettr,
    # --help) must not wait about 2 s for torch because another command imports it at module level.
    code = ("import sys; from perflab.cli import main; "
            "rc = main(['shuffle', '--n', '1000000000', '--start', '123456789', '--count', '5', '--json']); "
            "assert rc == 0, rc; "
            "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')); "
            "assert not bad, 'building the CLI imported ' + ', '.join(bad[:3])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert '"indices"' in r.stdout
