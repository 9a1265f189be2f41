"""Tests of `perflab.core.lock`."""

from __future__ import annotations

import io
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
from types import SimpleNamespace

import pytest

from perflab.core import lock
from perflab.core.errors import PerflabError

ROOT = Path(__file__).resolve().parents[3]


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


def _bench_pairs(tmp_path: Path, pairs: dict[str, tuple[float, dict[str, str]]]
                 ) -> dict[str, tuple[list[list[float]], list[str]]]:
    """Every pair of BENCHER processes (name -> (rep_ms, extra environment)) started at once, each pair
    with its own lock folder, released by one start signal: per pair, the two spans and the two stderrs."""
    go = tmp_path / "go"
    go.unlink(missing_ok=True)
    procs: dict[str, list[tuple[Path, subprocess.Popen[str]]]] = {}
    for name, (rep_ms, env) in pairs.items():
        (tmp_path / name).mkdir(exist_ok=True)
        outs = [tmp_path / name / f"span{i}.json" for i in range(2)]
        procs[name] = [(o, subprocess.Popen([sys.executable, "-c", BENCHER, str(go), str(o), str(rep_ms)],
                                            env=_env(tmp_path / name, **env), stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True)) for o in outs]
    everyone = [pair for pairs_ in procs.values() for pair in pairs_]
    try:
        deadline = time.monotonic() + 60  # all have imported torch and made a first call: one-time costs stay out
        while not all(Path(f"{o}.ready").exists() for o, _ in everyone) and time.monotonic() < deadline:
            time.sleep(0.02)
        go.write_text("")
        errs = {name: [p.communicate(timeout=40)[1] for _, p in ps] for name, ps in procs.items()}
    finally:
        for _, p in everyone:
            if p.poll() is None:
                p.kill()
    out = {}
    for name, ps in procs.items():
        assert all(p.returncode == 0 for _, p in ps), errs[name]
        out[name] = ([json.loads(o.read_text()) for o, _ in ps], errs[name])
    return out


@pytest.fixture(scope="module")
def bench_spans(tmp_path_factory):
    """The two experiments below run side by side (one start-up of torch for both, not one each): two
    processes taking turns on one lock, and the same two with the lock off. Each pair has its own lock
    folder, and the unlocked pair takes no lock at all, so neither pair can make the other wait."""
    return _bench_pairs(tmp_path_factory.mktemp("benches"),
                        {"locked": (1500, {}), "unlocked": (800, {"PERFLAB_LOCK": "off"})})


def test_in_kernel_is_false_when_ipython_is_half_imported(monkeypatch):
    def half_imported():
        raise AttributeError("partially initialized module 'IPython'")

    monkeypatch.setitem(sys.modules, "IPython", SimpleNamespace(get_ipython=half_imported))
    assert lock._in_kernel() is False

    class ZMQInteractiveShell:  # what a Jupyter kernel's shell is called
        pass

    monkeypatch.setitem(sys.modules, "IPython", SimpleNamespace(get_ipython=ZMQInteractiveShell))
    assert lock._in_kernel() is True


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_wait_is_one_line_that_rewrites_itself():
    """Whether two measurements ever wait on each other depends on the machine; the readout's places
    are checked here directly. A newcomer once met 21 lines for 21 waits: now each redraw overwrites the
    line before it (padded, so a shorter text leaves nothing of a longer one behind) and the turn's end
    ends the line."""
    tty = _Terminal()
    line = lock.WaitLine(tty)
    for s in (1.0, 2.0, 12.0):
        line.waiting("cpu", "another measurement of yours", s)
    line.measuring("cpu", "another measurement of yours", 12.3)
    line.done("cpu", 12.3, 3.2)
    out = tty.getvalue()
    assert out.count("\n") == 1 and out.endswith("\n"), out
    frames = out.rstrip("\n").split("\r")[1:]
    assert [f.rstrip() for f in frames] == [
        "waiting for cpu: another measurement of yours is running, 1 s",
        "waiting for cpu: another measurement of yours is running, 2 s",
        "waiting for cpu: another measurement of yours is running, 12 s",
        "cpu: waited 12 s for the device; measuring now",
        "cpu: waited 12 s for the device, measured 3.2 s"]
    assert all(len(b) >= len(a.rstrip()) for a, b in zip(frames, frames[1:], strict=False))  # each covers the last


def test_in_a_log_a_wait_is_one_line_when_it_starts_and_one_when_its_turn_ends():
    log = io.StringIO()
    line = lock.WaitLine(log)
    for _ in range(2):  # two waits: two lines each, whatever their length
        for s in (1.0, 2.0, 30.0):
            line.waiting("cpu", "another learner's measurement", s)
        line.measuring("cpu", "another learner's measurement", 30.2)
        line.done("cpu", 30.2, 0.5)
    assert log.getvalue().splitlines() == [
        "waiting for cpu: another learner's measurement is running, 1 s",
        "cpu: waited 30 s for the device, measured 0.5 s"] * 2
    said: list[tuple[str, bool]] = []
    lines = lock.Lines(lambda text, final: said.append((text, final)))
    lines.waiting("cpu", "another measurement", 3.0)
    lines.done("cpu", 3.0, 1.0)
    assert said == [("waiting for cpu: another measurement is running, 3 s", False),
                    ("cpu: waited 3.0 s for the device, measured 1.0 s", True)]


@pytest.mark.slow
def test_in_a_notebook_a_cells_waits_are_one_line_updated_in_place(tmp_path):
    """A real kernel (nbclient, as papermill runs a lesson): a cell that waits for two turns shows one
    output, the updated line, with both turns added up and no process id, command or label in it."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    code = textwrap.dedent(f"""
        import os, subprocess, sys
        os.environ["PERFLAB_LOCK_DIR"] = {str(tmp_path / "locks")!r}
        os.environ.pop("{lock.HELD_ENV}", None)
        from perflab.core.lock import device_lock
        holder = {HOLDER.replace("time.sleep(120)", "time.sleep(1.6)")!r}
        for _ in range(2):
            p = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True,
                                 env=dict(os.environ, PYTHONPATH={str(ROOT)!r}))
            assert p.stdout.readline().strip() == "held"
            with device_lock("cpu", label="matmul 1024³"):
                pass
            p.wait(timeout=30)
    """)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nbclient.NotebookClient(nb, kernel_name="python3", timeout=120).execute()
    outs = nb.cells[0].outputs
    assert len(outs) == 1 and outs[0]["output_type"] == "display_data", outs
    text = outs[0]["data"]["text/plain"]
    assert re.fullmatch(r"cpu: waited \d+(\.\d)? s for the device over 2 turns, measured \d+\.\d+ s", text), text


def test_a_lock_file_this_user_cannot_write_is_opened_read_only(tmp_path, monkeypatch):
    real = os.open
    modes = []

    def opener(path, flags, *a):
        modes.append(flags & (os.O_RDWR | os.O_WRONLY))
        if flags & os.O_RDWR:
            raise PermissionError(13, "Permission denied")
        return real(path, flags, *a)

    (tmp_path / "x.lock").write_text("")
    monkeypatch.setattr(lock.os, "open", opener)
    fd = lock._open(tmp_path / "x.lock")
    os.close(fd)
    assert modes == [os.O_RDWR, 0]  # read-write refused, then read-only: flock works on either


def test_a_file_created_meanwhile_is_opened_and_a_hopeless_folder_is_one_line(tmp_path, monkeypatch):
    real = os.open
    calls = []

    def racing(path, flags, *a):
        calls.append(flags)
        if flags & os.O_EXCL:
            if len(calls) < 3:
                raise FileExistsError(17, "File exists")  # another process won the race
        elif len(calls) < 3:
            raise FileNotFoundError(2, "No such file")
        return real(path, flags | os.O_CREAT, 0o666)

    monkeypatch.setattr(lock.os, "open", racing)
    os.close(lock._open(tmp_path / "y.lock"))
    assert len(calls) == 3

    def never(path, flags, *a):
        raise FileExistsError(17, "File exists") if flags & os.O_EXCL else FileNotFoundError(2, "gone")

    monkeypatch.setattr(lock.os, "open", never)
    with pytest.raises(PerflabError, match="cannot open the lock file .*: set PERFLAB_LOCK_DIR to a folder every user can write"):
        lock._open(tmp_path / "z.lock")


def test_holder_of_an_unreadable_record_is_another_measurement(tmp_path):
    p = tmp_path / "perflab-cpu.lock"
    p.write_text("{not json")
    assert lock.holder(p) == "another measurement"
    assert lock.holder(tmp_path / "missing.lock") == "another measurement"
    p.write_text(json.dumps(["a", "list"]))
    assert lock.holder(p) == "another measurement"


def test_another_users_measurement_is_only_ever_another_learners(tmp_path, monkeypatch):
    """A forged record with a user name, a command and a model in it: none of it is ever shown, because
    the text for another uid is built from fixed words alone."""
    p = tmp_path / "perflab-cpu.lock"
    p.write_text(json.dumps({"uid": os.getuid() + 1, "pid": 4242, "user": "alice", "since": 0,
                             "label": "perflab audit of mistral from its config"}))
    assert lock.holder(p) == "another learner's measurement"
    # even a private note planted under this user's name is not read for someone else's record
    (tmp_path / f"perflab-cpu.lock.{os.getuid()}.mine").write_text(json.dumps({"pid": 4242, "label": "torchrun ×2"}))
    assert lock.holder(p) == "another learner's measurement"


def test_this_users_own_measurement_is_named_in_fixed_words_too(tmp_path, monkeypatch):
    """A newcomer saw "your own measurement (pid …: torchrun …lab06_ring ×2)" 21 times: another job of
    theirs, its command line included. Now neither a pid nor a label is written anywhere or shown."""
    monkeypatch.setenv("PERFLAB_LOCK_DIR", str(tmp_path))
    monkeypatch.delenv(lock.HELD_ENV, raising=False)
    with lock.device_lock("cpu", label="torchrun perflab.distributed.workers.lab06_ring ×2"):
        p = tmp_path / "perflab-cpu.lock"
        record = json.loads(p.read_text())
        assert set(record) == {"uid", "pid", "since"}  # the shared file: no name, no command, no model
        assert lock.holder(p) == "another measurement of yours"
        assert sorted(f.name for f in tmp_path.iterdir()) == ["perflab-cpu.lock"]  # nothing else written


def test_a_turn_adds_its_wait_and_its_measurement_to_the_timesheet(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_LOCK_DIR", str(tmp_path))
    monkeypatch.delenv(lock.HELD_ENV, raising=False)
    before = lock.turns()
    with lock.device_lock("cpu") as waited:
        time.sleep(0.05)
    after = lock.turns()
    assert after["turns"] == before["turns"] + 1
    assert after["waited_s"] - before["waited_s"] == pytest.approx(waited)
    assert after["measured_s"] - before["measured_s"] >= 0.05  # a sleep is never shorter
    assert lock.turns_line(after) == ""  # nothing waited since
    monkeypatch.setitem(lock._turns, "waited_s", after["waited_s"] + 28.0)
    monkeypatch.setitem(lock._turns, "measured_s", after["measured_s"] + 41.0)
    assert lock.turns_line(after) == "waited 28 s for the device, measured 41 s"


@pytest.mark.slow
def test_two_processes_measuring_the_cpu_take_turns(bench_spans):
    (a0, a1), (b0, b1) = (spans := bench_spans["locked"])[0]
    assert a1 <= b0 or b1 <= a0, f"the two measurements overlapped: {spans}"
    # the one that waited said so, in the readout's words, on stderr (stdout may be JSON)
    errs = spans[1]
    assert any("waiting for cpu: another measurement of yours is running" in e for e in errs), errs
    assert all("pid" not in e for e in errs), errs
    assert any("cpu: waited " in e and " for the device, measured " in e for e in errs), errs


@pytest.mark.slow
def test_without_the_lock_the_same_two_measurements_overlap(bench_spans):
    """The control: the turn-taking above is the lock's doing, not the start-up's."""
    (a0, a1), (b0, b1) = bench_spans["unlocked"][0]
    assert a0 < b1 and b0 < a1, "without the lock the two measurements should run at the same time"


def test_a_killed_holders_lock_is_recovered_and_predictions_never_wait(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLAB_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv(lock.HELD_ENV, raising=False)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], env=_env(tmp_path), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        said: list[str] = []
        t0 = time.monotonic()
        with pytest.raises(lock.LockTimeout, match=r"cpu stayed busy for \d+ s \(another measurement of yours is "
                                                   r"running\): try again when it ends"):
            with lock.device_lock("cpu", timeout=1.3, say=lambda text, final: said.append(text)):
                pass
        assert time.monotonic() - t0 >= 1.3
        # the holder runs as this user: it is "another measurement of yours", never its pid or label
        assert said and said[0].startswith("waiting for cpu: another measurement of yours is running")
        assert re.search(r" is running, \d+ s$", said[0])

        # predictions only compute: they go ahead while the device is busy
        from perflab.core.roofline import attainable_flops, matmul_intensity
        from perflab.flops.counting import matmul_flops

        # (they return while the holder keeps the lock for 120 s: had they waited, the test would time out)
        assert attainable_flops(matmul_intensity(64, 64, 64, 4), 1e12, 1e11) > 0 and matmul_flops(2, 3, 4) == 48

        holder.send_signal(signal.SIGKILL)  # the kernel dies without releasing anything itself
        holder.wait(timeout=10)
        after: list[str] = []
        with lock.device_lock("cpu", timeout=2, say=lambda text, final: after.append(text)):
            pass  # the kernel released the dead holder's flock: taken at once (a LockTimeout otherwise)
        assert after == []
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
            assert lock.holder(f) == "another measurement of yours"
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
