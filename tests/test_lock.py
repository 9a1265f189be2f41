"""One device, many learners (perflab/core/lock.py): measurements in two processes take turns, a
killed holder's lock comes back, predictions never wait, and the shared folder is usable by all."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from perflab.core import lock

ROOT = Path(__file__).resolve().parents[1]

# Each process waits for the same start signal, then times a 20 ms sleep for ~1.5 s with
# perflab's bench, and writes down when its first and last timed call ran.
BENCHER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from perflab.core.timing import bench
    go, out = Path(sys.argv[1]), Path(sys.argv[2])
    calls = []
    def fn():
        calls.append(time.time()); time.sleep(0.02); calls.append(time.time())
    fn()
    Path(str(out) + ".ready").write_text("")
    while not go.exists():
        time.sleep(0.01)
    bench(fn, device="cpu", warmup_ms=1, rep_ms=float(sys.argv[3]), min_sample_s=0)
    out.write_text(json.dumps([min(c for c in calls[2:]), max(calls)]))
""")

HOLDER = textwrap.dedent("""
    import time
    from perflab.core.lock import device_lock
    with device_lock("cpu", label="a long measurement"):
        print("held", flush=True)
        time.sleep(120)
""")


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PERFLAB_LOCK_DIR=str(tmp_path / "locks"), **more)
    env.pop(lock.HELD_ENV, None)
    return env


def _two_benches(tmp_path: Path, rep_ms: float, **env: str) -> tuple[list[list[float]], list[str]]:
    go = tmp_path / "go"
    go.unlink(missing_ok=True)
    outs = [tmp_path / f"span{i}.json" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", BENCHER, str(go), str(o), str(rep_ms)], env=_env(tmp_path, **env),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for o in outs]
    try:
        deadline = time.monotonic() + 40  # both have imported torch and made a first call: one-time costs stay out
        while not all(Path(f"{o}.ready").exists() for o in outs) and time.monotonic() < deadline:
            time.sleep(0.02)
        go.write_text("")
        errs = [p.communicate(timeout=40)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), errs
    return [json.loads(o.read_text()) for o in outs], errs


@pytest.mark.slow
def test_two_processes_measuring_the_cpu_take_turns(tmp_path):
    (a0, a1), (b0, b1) = (spans := _two_benches(tmp_path, rep_ms=1500))[0]
    assert a1 <= b0 or b1 <= a0, f"the two measurements overlapped: {spans}"
    # the one that waited said so, in the readout's words, on stderr (stdout may be JSON)
    errs = spans[1]
    assert any("waiting for cpu: another measurement is running" in e for e in errs), errs


@pytest.mark.slow
def test_without_the_lock_the_same_two_measurements_overlap(tmp_path):
    """The control: the turn-taking above is the lock's doing, not the start-up's."""
    (a0, a1), (b0, b1) = _two_benches(tmp_path, rep_ms=800, PERFLAB_LOCK="off")[0]
    assert a0 < b1 and b0 < a1, "without the lock the two measurements should run at the same time"


def test_a_killed_holders_lock_is_recovered_and_predictions_never_wait(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv(lock.HELD_ENV, raising=False)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], env=_env(tmp_path), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        said: list[str] = []
        t0 = time.monotonic()
        with pytest.raises(lock.LockTimeout, match=r"cpu stayed busy for \d+ s \(another measurement is running"):
            with lock.device_lock("cpu", timeout=1.3, say=lambda text, final: said.append(text)):
                pass
        assert time.monotonic() - t0 >= 1.3
        assert said and said[0].startswith("waiting for cpu: another measurement is running (")
        assert f"pid {holder.pid}: a long measurement" in said[0] and re.search(r", \d+ s$", said[0])

        # predictions only compute: they go ahead while the device is busy
        from perflab.core.roofline import attainable_flops, matmul_intensity
        from perflab.flops.counting import matmul_flops

        t0 = time.monotonic()
        assert attainable_flops(matmul_intensity(64, 64, 64, 4), 1e12, 1e11) > 0 and matmul_flops(2, 3, 4) == 48
        assert time.monotonic() - t0 < 0.5

        holder.send_signal(signal.SIGKILL)  # the kernel dies without releasing anything itself
        holder.wait(timeout=10)
        t0 = time.monotonic()
        with lock.device_lock("cpu", timeout=2) as waited:
            assert waited < 0.5
        assert time.monotonic() - t0 < 1
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_the_lock_folder_and_files_are_everyones(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_LOCK_DIR", str(tmp_path / "shared" / "locks"))
    monkeypatch.delenv(lock.HELD_ENV, raising=False)
    old = os.umask(0o077)  # a strict umask must not make the folder private
    try:
        with lock.device_lock("cpu"):
            folder = lock.lock_dir()
            assert stat.S_IMODE(folder.stat().st_mode) == 0o1777
            f = folder / "perflab-cpu.lock"
            assert stat.S_IMODE(f.stat().st_mode) == 0o666
            assert f"pid {os.getpid()}" in lock.holder(f)
    finally:
        os.umask(old)


def test_the_lock_is_reentrant_and_children_inherit_the_hold(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_LOCK_DIR", str(tmp_path))
    monkeypatch.delenv(lock.HELD_ENV, raising=False)
    with lock.device_lock("cpu"), lock.device_lock("cpu:0", timeout=0.2):  # no waiting for itself
        # a child (a torchrun rank, a DataLoader worker) measures under its parent's turn
        code = "from perflab.core.lock import device_lock\nwith device_lock('cpu', timeout=0.5): print('ok')"
        out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                             capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "ok", out.stderr
    assert lock.HELD_ENV not in os.environ


def test_device_keys():
    assert lock.device_key("cpu") == lock.device_key("cpu:0") == "cpu"
    assert lock.device_key("mps") == "mps"
    assert lock.device_key("cuda:1").startswith("cuda-")


def test_a_lock_folder_nobody_can_use_is_said_once_and_the_measurement_goes_on(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("PERFLAB_LOCK_DIR", str(blocker / "locks"))  # under a file: cannot be created
    monkeypatch.delenv(lock.HELD_ENV, raising=False)
    for _ in range(2):
        with lock.device_lock("cpu") as waited:
            assert waited == 0.0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("perflab: measuring without taking turns: cannot create the lock folder")
    assert "set PERFLAB_LOCK_DIR to a folder every user can write" in err[0]


def test_devices_lock_takes_every_devices_lock(tmp_path, monkeypatch):
    """A two-GPU job holds both GPUs: a measurement on the second one waits too."""
    monkeypatch.setenv("PERFLAB_LOCK_DIR", str(tmp_path))
    monkeypatch.delenv(lock.HELD_ENV, raising=False)
    code = ("import sys\nfrom perflab.core.lock import device_lock, LockTimeout\n"
            "try:\n    with device_lock(sys.argv[1], timeout=0.3): print('free')\n"
            "except LockTimeout as e: print('busy')")
    env = {k: v for k, v in os.environ.items() if k != lock.HELD_ENV}
    env["PYTHONPATH"] = str(ROOT)
    with lock.devices_lock(["mps", "cpu"]):
        # another user's process (not a child of the job: no inherited hold) finds both busy
        for dev in ("cpu", "mps"):
            out = subprocess.run([sys.executable, "-c", code, dev], env=env, capture_output=True, text=True, timeout=30)
            assert out.stdout.strip() == "busy", (dev, out.stderr)
        with lock.device_lock("mps", timeout=0.2):  # the job itself re-enters without waiting
            pass
    assert lock.HELD_ENV not in os.environ
