"""The setup's torch decision table (README, 'How the setup chooses torch'), without installing anything."""

import importlib.util
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def setup_env(monkeypatch):
    spec = importlib.util.spec_from_file_location("setup_env", ROOT / "tools" / "setup_env.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    calls = []
    state = {"have": None, "after": "cpu"}

    def fake_run(cmd, check=True, quiet=False):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    def fake_build(python):
        return state["have"] if not calls else state["after"]

    monkeypatch.setattr(mod, "run", fake_run)
    monkeypatch.setattr(mod, "torch_build", fake_build)
    monkeypatch.setattr(mod.platform, "system", lambda: "Linux")
    monkeypatch.delenv("PERFLAB_TORCH", raising=False)
    monkeypatch.delenv("PERFLAB_TORCH_INDEX", raising=False)
    return mod, calls, state


def _torch_args(calls):
    return [c[c.index("install") + 1:] for c in calls]


def test_cpu_machine_gets_the_pinned_cpu_wheel_only(setup_env):
    mod, calls, state = setup_env
    mod.install_torch("py", gpu=False)
    args = _torch_args(calls)
    assert args[0][-1] == "torch==2.13.0+cpu"
    assert not any(a == "torch" or a.startswith("torch>") for cmd in args for a in cmd)


def test_gpu_machine_gets_a_cuda_build_never_the_local_cpu_wheel(setup_env):
    mod, calls, state = setup_env
    state["after"] = "cuda"
    mod.install_torch("py", gpu=True)
    (args,) = _torch_args(calls)
    assert args[-1] == "torch>=2.1,!=2.13.0+cpu"


def test_existing_torch_is_kept(setup_env):
    mod, calls, state = setup_env
    state["have"] = "cuda"
    mod.install_torch("py", gpu=True)
    assert calls == []
    state["have"] = "cpu"
    mod.install_torch("py", gpu=False)
    assert calls == []


def test_cpu_build_on_a_gpu_machine_is_replaced_unless_kept(setup_env, monkeypatch):
    mod, calls, state = setup_env
    state["have"], state["after"] = "cpu", "cuda"
    monkeypatch.setenv("PERFLAB_TORCH", "keep")
    mod.install_torch("py", gpu=True)
    assert calls == []
    monkeypatch.setenv("PERFLAB_TORCH", "auto")
    mod.install_torch("py", gpu=True)
    (args,) = _torch_args(calls)
    assert "--force-reinstall" in args and args[-1].startswith("torch>=2.1")


def test_index_override(setup_env, monkeypatch):
    mod, calls, state = setup_env
    monkeypatch.setenv("PERFLAB_TORCH_INDEX", "https://download.pytorch.org/whl/cu128")
    mod.install_torch("py", gpu=True)
    (args,) = _torch_args(calls)
    assert args[-2:] == ["--index-url", "https://download.pytorch.org/whl/cu128"]


def test_bad_choice_is_one_line(setup_env, monkeypatch):
    mod, calls, state = setup_env
    monkeypatch.setenv("PERFLAB_TORCH", "rocm7")
    with pytest.raises(SystemExit, match="auto, cpu, cuda or keep"):
        mod.install_torch("py", gpu=False)


@pytest.fixture
def chromium_env(setup_env, monkeypatch, tmp_path):
    mod, calls, state = setup_env
    monkeypatch.setenv("PERFLAB_CHROMIUM", str(tmp_path / "chromium"))  # none there
    monkeypatch.setattr(mod.os, "geteuid", lambda: 0)
    monkeypatch.setattr(mod.shutil, "which", lambda name: f"/usr/bin/{name}")
    spawned = []

    def fake_spawn(cmd):
        spawned.append(cmd)
        return subprocess.Popen(["true"])

    monkeypatch.setattr(mod, "spawn", fake_spawn)
    return mod, spawned, tmp_path / "chromium"


def test_chromium_installs_quietly_in_the_background_as_root_with_apt(chromium_env, capsys):
    mod, spawned, _ = chromium_env
    proc = mod.start_chromium_install()
    (cmd,) = spawned
    script = cmd[-1]
    assert script.startswith("apt-get update -qq") and "--no-install-recommends chromium" in script
    assert "apt-get install -y -qq" in script
    mod.finish_chromium_install(proc, 0.0)
    assert "chromium installed" in capsys.readouterr().out


def test_chromium_install_is_left_alone_when_present_or_impossible(chromium_env, monkeypatch, capsys):
    mod, spawned, path = chromium_env
    path.write_text("")
    assert mod.start_chromium_install() is None
    path.unlink()
    monkeypatch.setattr(mod.os, "geteuid", lambda: 1000)
    assert mod.start_chromium_install() is None
    monkeypatch.setattr(mod.os, "geteuid", lambda: 0)
    monkeypatch.setattr(mod.shutil, "which", lambda name: None)
    assert mod.start_chromium_install() is None
    assert spawned == []
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "chromium" in ln]
    assert len(lines) == 2 and all("browser test will be skipped" in ln for ln in lines)


def test_extras_are_installed_with_dev_and_unknown_ones_stop_the_setup(setup_env):
    mod, calls, state = setup_env
    assert mod.install_spec(["course"]).endswith("[dev,course]")
    assert mod.install_spec([]).endswith("[dev]")
    assert mod.parse_extras("course, test") == ["course", "test"]
    with pytest.raises(SystemExit, match="no extra gpu in pyproject.toml: choose from .*course"):
        mod.parse_extras("course,gpu")


def test_bubblewrap_is_installed_quietly_where_root_with_apt_and_never_fails(setup_env, monkeypatch, capsys):
    mod, _calls, _state = setup_env
    ran = []
    have = {"bwrap": None}

    def fake(cmd, **kw):
        ran.append(cmd)
        assert kw["timeout"] <= 300 and kw["capture_output"]
        if cmd[0] == "sh":
            have["bwrap"] = "/usr/bin/bwrap"  # found once the package lists are fresh
        return subprocess.CompletedProcess(cmd, 0 if cmd[0] == "sh" else 100)

    monkeypatch.setattr(mod.sys, "platform", "linux")
    monkeypatch.setattr(mod.os, "geteuid", lambda: 0)
    monkeypatch.setattr(mod.shutil, "which", lambda name: "/usr/bin/apt-get" if name == "apt-get" else have[name])
    monkeypatch.setattr(mod.subprocess, "run", fake)
    mod.install_bubblewrap()
    assert ran[0][:2] == ["apt-get", "install"] and "bubblewrap" in ran[0] and "update" in ran[1][2]
    assert "bubblewrap installed" in capsys.readouterr().out
    ran.clear()
    mod.install_bubblewrap()  # there already: nothing to do
    assert ran == []
    have["bwrap"] = None
    monkeypatch.setattr(mod.os, "geteuid", lambda: 1000)
    mod.install_bubblewrap()  # not root: one line, no failure
    assert ran == [] and "needs root" in capsys.readouterr().out
