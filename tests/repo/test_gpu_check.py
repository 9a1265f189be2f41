"""The GPU check (tools/gpu_check/): its rehearsal on this CPU (`make gpu-rehearsal`), the per-test
time limit of its pytest phase, and the rules it decides by (wheel tags, time shares, verdicts, the
archive's parts), on inputs made here."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_check.archive  # noqa: E402
import gpu_check.main  # noqa: E402
import gpu_check.probes  # noqa: E402
import gpu_check.records  # noqa: E402
import gpu_check.runner  # noqa: E402
import gpu_check.wheels  # noqa: E402


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def _tiny_wheel(folder: Path) -> Path:
    """A pure-Python wheel of one module, made here: what the install phase does with .whl/."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "gpucheck_tiny-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("gpucheck_tiny.py", "VALUE = 42\n")
        z.writestr("gpucheck_tiny-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: gpucheck-tiny\nVersion: 1.0\n")
        z.writestr("gpucheck_tiny-1.0.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("gpucheck_tiny-1.0.dist-info/RECORD", "")
    return path


@pytest.mark.slow  # about a minute: every phase's CPU part, one lesson and one lab solution in smoke mode
@pytest.mark.notebooks  # it runs two notebooks under papermill: in the lessons' group, not beside them
def test_the_rehearsal_runs_every_phase_and_says_what_it_skipped(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    _tiny_wheel(tmp_path / "wheels")
    budget = 300
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check"), "--rehearsal", "--out", str(out),
                        "--budget", str(budget), "--wheels", str(tmp_path / "wheels"), "--work", str(work)],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=budget + 60)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["rehearsal"] is True and s["seconds"] <= budget
    assert list(s["phases"]) == list(gpu_check.runner.PHASES)
    for name, ph in s["phases"].items():
        assert ph["status"] in ("passed", "skipped"), (name, ph)
        assert isinstance(ph["seconds"], float | int) and ph["seconds"] >= 0
        if ph["status"] == "skipped":
            assert ph["reason"].strip(), name
        for item in ph.get("items", []):
            if item["status"] != "passed":
                assert item.get("reason", "").strip(), (name, item)
    install = {i["name"]: i for i in s["phases"]["install"]["items"]}
    assert install["wheels"]["status"] == "passed"  # the made wheel went into the target folder, not this Python
    assert (work / "site" / "gpucheck_tiny.py").exists()  # into the check's own target folder
    assert importlib.util.find_spec("gpucheck_tiny") is None  # and not into this Python
    gpu_tests = s["phases"]["gpu_tests"]
    assert gpu_tests["figures"]["tests"] > 0  # the gpu tests were collected and each was run (and skipped here)
    if not s["cuda_available"]:
        assert gpu_tests["status"] == "skipped" and "CUDA" in gpu_tests["reason"]
        probes = {i["name"] for i in s["phases"]["instruments"]["items"]}
        assert set(gpu_check.probes.PROBES) | {"audit"} <= probes
    nb = s["phases"]["notebooks"]
    ran = [i["name"] for i in nb["items"] if i["status"] == "passed"]
    assert any(n.startswith("notebooks/") for n in ran) and any(n.startswith("labs/solutions/") for n in ran), nb
    assert nb["figures"]["smoke"] is True
    # DIR holds the summary and one archive, within what a GPU box hands back
    names = sorted(p.name for p in out.iterdir())
    assert names == ["gpu-check.tar.gz", "summary.json"] and s["archive"] == ["gpu-check.tar.gz"]
    assert (out / "gpu-check.tar.gz").stat().st_size < gpu_check.archive.PART_BYTES
    with tarfile.open(out / "gpu-check.tar.gz") as tar:
        members = tar.getnames()
    assert "gpu-check/summary.json" in members
    assert any(m.startswith("gpu-check/notebooks/") and m.endswith(".ipynb") for m in members)
    assert any(m.startswith("gpu-check/instruments/") for m in members)
    assert not any(m.startswith("gpu-check/site/") for m in members)


def test_a_test_past_its_limit_is_ended_and_reported_and_the_next_one_runs(tmp_path):
    (tmp_path / "test_slow.py").write_text(
        "import time\n\ndef test_hangs():\n    time.sleep(60)\n\ndef test_after():\n    assert True\n")
    reports = tmp_path / "reports.jsonl"
    env = _env()
    env.update({"PYTHONPATH": os.pathsep.join([str(ROOT / "tools"), env["PYTHONPATH"]]),
                "GPU_CHECK_REPORTS": str(reports), "GPU_CHECK_TEST_LIMIT": "2"})
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "gpu_check.plugin", "-q"]
    r = subprocess.run([*cmd, "test_slow.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 86, r.stdout[-2000:] + r.stderr[-2000:]
    recs = gpu_check.records.read_reports(reports)
    assert recs[0] == {"collected": ["test_slow.py::test_hangs", "test_slow.py::test_after"]}
    assert recs[1:] == [{"started": "test_slow.py::test_hangs"},
                        {"nodeid": "test_slow.py::test_hangs", "outcome": "timeout", "seconds": 2.0}]
    assert "in test_hangs" in Path(f"{reports}.stacks").read_text()  # where it was stuck, for the log
    # the check starts pytest again on what is left
    r = subprocess.run([*cmd, "test_slow.py::test_after"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0
    assert gpu_check.records.read_reports(reports)[-1]["outcome"] == "passed"


@pytest.mark.parametrize("name, version, fits", [
    ("papermill-2.7.0-py3-none-any.whl", (3, 12), True),
    ("debugpy-1.8.22-py2.py3-none-any.whl", (3, 11), True),
    ("rpds_py-2026.9.1-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", (3, 12), True),
    ("rpds_py-2026.9.1-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", (3, 11), False),
    ("pyzmq-27.3.0-cp312-abi3-manylinux_2_26_x86_64.manylinux_2_28_x86_64.whl", (3, 13), True),
    ("pyzmq-27.3.0-cp312-abi3-manylinux_2_26_x86_64.manylinux_2_28_x86_64.whl", (3, 11), False),
    ("tornado-6.6.1-cp311-abi3-manylinux_2_28_aarch64.whl", (3, 12), False),  # another machine
    ("not-a-wheel.whl", (3, 12), False),
])
def test_a_wheel_fits_by_its_tags(name, version, fits):
    assert gpu_check.wheels.wheel_fits(name, version, "x86_64") is fits


def test_each_phase_gets_its_share_of_what_is_left_and_notebooks_the_rest():
    remaining = 408.0
    caps = {p: remaining - gpu_check.runner.phase_cut(p, remaining) for p in gpu_check.runner.PHASES}
    assert caps["notebooks"] == remaining  # the last phase takes all that is left
    for p in gpu_check.runner.PHASES:
        assert min(gpu_check.runner.FLOOR_S, remaining) <= caps[p] <= remaining
    assert caps["instruments"] > caps["install"]
    assert gpu_check.runner.phase_cut("install", 10.0) == 0.0  # less than the floor left: all of it


def test_a_phase_fails_if_one_item_failed_and_is_skipped_only_if_all_were():
    passed, skipped = {"name": "a", "status": "passed"}, {"name": "b", "status": "skipped", "reason": "no GPU"}
    failed = {"name": "c", "status": "failed", "reason": "boom"}
    assert gpu_check.records.verdict([passed, skipped]) == ("passed", "b: no GPU")
    assert gpu_check.records.verdict([skipped]) == ("skipped", "b: no GPU")
    assert gpu_check.records.verdict([passed, failed, skipped]) == ("failed", "c: boom")
    assert gpu_check.records.verdict([])[0] == "skipped"
    late = {"name": "d", "status": "not run", "reason": "the phase's time was spent"}
    assert gpu_check.records.verdict([passed, late]) == ("passed", "1 of 2 not run for want of time; d: the phase's time was spent")


def test_a_large_archive_is_split_into_parts_that_join_again(tmp_path):
    data = os.urandom(2500)
    archive = tmp_path / "gpu-check.tar.gz"
    archive.write_bytes(data)
    names = gpu_check.archive.split(archive, 1000, 6)
    assert names == ["gpu-check.tar.gz.00", "gpu-check.tar.gz.01", "gpu-check.tar.gz.02"]
    assert b"".join((tmp_path / n).read_bytes() for n in names) == data and not archive.exists()
    archive.write_bytes(data)
    assert gpu_check.archive.split(archive, 1000, 2)[-1].startswith("(truncated")


def test_a_wheel_unpacks_as_pip_target_lays_it_out(tmp_path):
    wheel = _tiny_wheel(tmp_path / "w")
    gpu_check.wheels.unpack_wheel(wheel, tmp_path / "site")
    assert (tmp_path / "site" / "gpucheck_tiny.py").read_text() == "VALUE = 42\n"


@pytest.mark.parametrize("argv, msg", [
    (["--budget", "420"], "give --out DIR"),
    (["--out", "X", "--budget", "10"], "too small"),
    (["--out", "X", "--phases", "install,gpu"], "unknown phase 'gpu'"),
])
def test_bad_arguments_get_one_line(argv, msg, capsys):
    assert gpu_check.main.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1


def test_a_childs_json_is_read_after_lines_a_library_printed_first(tmp_path):
    f = tmp_path / "out.json"
    f.write_text('Some weights were not initialized {from the checkpoint}\n{"mfu": 0.41,\n "basis": "bf16 peak"}\n')
    assert gpu_check.records.read_json(f) == {"mfu": 0.41, "basis": "bf16 peak"}
    f.write_text("no json at all\n")
    with pytest.raises(ValueError):
        gpu_check.records.read_json(f)
