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


# The package in three parts by layer, each checked by its own test (each well under the 30 s a test
# may take; one run over the whole package took about 40 s on two cores). Every file of perflab/ is
# in exactly one part (test_the_parts_cover_the_package).
PARTS = {
    "measuring core and topics below": ["core", "workload", "grading", "flops", "gemm", "memory", "numerics",
                                        "attention", "numa", "dataloading", "_lazy.py", "__init__.py"],
    "distributed and compiled training": ["distributed", "profiling", "compiler", "tune", "shard", "hunt"],
    "plan, audit, course, classroom and commands": ["plan", "audit", "course", "classroom", "commands", "cli.py",
                                                    "__main__.py"],
}


def _run(part: list[str]) -> dict:
    exe = _pyright()
    if exe is None:
        pytest.skip("pyright is not installed: pip install perflab[test] (or pyright) to type-check the package")
    # --pythonpath: resolve torch, numpy, ... from the interpreter running the tests; the files named
    # take the place of pyproject.toml's include, whose other settings hold
    proc = subprocess.run([exe, "--outputjson", "--pythonpath", sys.executable, *(f"perflab/{p}" for p in part)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"pyright printed no JSON (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")


def test_the_parts_cover_the_package():
    named = [p for part in PARTS.values() for p in part]
    assert len(named) == len(set(named)), "a part of perflab/ is named twice"
    present = {p.name for p in (ROOT / "perflab").iterdir()
               if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"}
    assert present == set(named), f"not type-checked: {sorted(present - set(named))}; gone: {sorted(set(named) - present)}"


@pytest.mark.slow
@pytest.mark.parametrize("part", list(PARTS))
def test_pyright_reports_no_error_in_the_package(part):
    report = _run(PARTS[part])
    errors = [d for d in report["generalDiagnostics"] if d["severity"] == "error"]
    lines = [f"{Path(d['file']).relative_to(ROOT)}:{d['range']['start']['line'] + 1}: {d['message'].splitlines()[0]}"
             f" ({d.get('rule', '')})" for d in errors]
    assert not errors, f"pyright found {len(errors)} error(s):\n" + "\n".join(lines)
    want = sum(1 for p in PARTS[part] for _ in ((ROOT / "perflab" / p).rglob("*.py") if (ROOT / "perflab" / p).is_dir()
                                                    else [p]))
    assert report["summary"]["filesAnalyzed"] >= want  # every file of the part was read, not an empty selection
