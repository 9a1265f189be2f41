"""pyright (basic mode, configured in pyproject.toml's [tool.pyright]) reports no error in perflab/.

The CUDA branches never run on a CPU machine: a None that is not checked, a name bound only on one
branch or a wrong argument type there would first fail on a learner's GPU. The type check reads
those branches too, so a new error fails here rather than there.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _pyright() -> str | None:
    beside = Path(sys.executable).with_name("pyright")  # the virtualenv's own, when pip installed it
    return str(beside) if beside.exists() else shutil.which("pyright")


def _run() -> dict:
    exe = _pyright()
    if exe is None:
        pytest.skip("pyright is not installed: pip install perflab[test] (or pyright) to type-check the package")
    # --pythonpath: resolve torch, numpy, ... from the interpreter running the tests
    proc = subprocess.run([exe, "--outputjson", "--pythonpath", sys.executable], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"pyright printed no JSON (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")


@pytest.mark.slow
def test_pyright_reports_no_error_in_the_package():
    report = _run()
    errors = [d for d in report["generalDiagnostics"] if d["severity"] == "error"]
    lines = [f"{Path(d['file']).relative_to(ROOT)}:{d['range']['start']['line'] + 1}: {d['message'].splitlines()[0]}"
             f" ({d.get('rule', '')})" for d in errors]
    assert not errors, f"pyright found {len(errors)} error(s):\n" + "\n".join(lines)
    assert report["summary"]["filesAnalyzed"] > 50  # the whole package was read, not an empty include
