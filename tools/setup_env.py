#!/usr/bin/env python3
"""Set up the course's virtual environment: the right torch first, then everything else.

Run by `make setup` (and so by `make lab` and `make test`). Standard library only, so that it
works on a machine that has nothing but Python and pip.

How torch is chosen (override with PERFLAB_TORCH=cpu|cuda|keep, or give the index with
PERFLAB_TORCH_INDEX=<url>):

* A torch that is already importable in the environment is kept, unless it is a CPU build on a
  machine that has an NVIDIA GPU (then a CUDA build is installed; PERFLAB_TORCH=keep keeps it).
* If the Python that runs this script already has a CUDA torch (a GPU box's system or conda
  Python), the venv is created with --system-site-packages so that torch is reused, not
  downloaded again.
* NVIDIA GPU present, no torch: `pip install torch` from PyPI, whose Linux wheels are CUDA builds.
* No GPU (Linux): the CPU wheel `torch==2.13.0+cpu`, from a local wheel folder if pip is
  configured with one, else from PyTorch's CPU index. An unpinned `torch` from PyPI would pull
  several GB of CUDA libraries that a CPU-only machine cannot use; this never asks for it.
* macOS: `torch==2.13.0` from PyPI (its macOS wheels are CPU/MPS builds).

Then perflab, its dependencies and the extras asked for are installed (`-e .[dev,<extras>]`:
`make lab` asks for course,kernels, `make test` for course,kernels,test,site,hta); torch is already satisfied, so it
is left alone. An environment that has the extras asked for already is up to date. This uses uv (`pip install uv`, then `uv pip install`: about 15 s instead of a
minute with pip on 2 cores) when the venv has its own packages and pip is not told to work offline;
pip otherwise, or if uv fails, or with PERFLAB_INSTALLER=pip. Finally the `pynvml` compatibility shim that ipyexperiments pulls in is
removed (nvidia-ml-py provides the real `pynvml` module; the shim only makes every
`import torch` print a FutureWarning).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CPU_TORCH = "2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def say(msg: str) -> None:
    print(f"[setup] {msg}", flush=True)


def run(cmd: list[str], check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    say("$ " + " ".join(cmd))
    kw: dict[str, Any] = {"stdout": subprocess.DEVNULL} if quiet else {}
    return subprocess.run(cmd, check=check, **kw)


def has_nvidia_gpu() -> bool:
    """True when an NVIDIA driver reports at least one GPU."""
    gpus = Path("/proc/driver/nvidia/gpus")
    if gpus.is_dir() and any(gpus.iterdir()):
        return True
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
            return out.returncode == 0 and "GPU" in out.stdout
        except (OSError, subprocess.TimeoutExpired):
            return False
    return False


def torch_build(python: str) -> str | None:
    """'cuda', 'rocm', 'cpu' for the torch importable by `python`, or None when there is none."""
    code = (
        "import torch, sys\n"
        "v = torch.version\n"
        "sys.stdout.write('cuda' if v.cuda else 'rocm' if getattr(v, 'hip', None) else 'cpu')\n"
    )
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def venv_python(venv_dir: Path) -> str:
    sub = "Scripts/python.exe" if os.name == "nt" else "bin/python"
    return str(venv_dir / sub)


def stamp_of() -> str:
    h = hashlib.sha256()
    for name in ("pyproject.toml", "tools/setup_env.py"):
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()[:16]


def install_torch(py: str, gpu: bool) -> None:
    choice = os.environ.get("PERFLAB_TORCH", "auto").lower()
    if choice not in {"auto", "cpu", "cuda", "keep"}:
        sys.exit(f"[setup] PERFLAB_TORCH must be auto, cpu, cuda or keep (got {choice!r})")
    have = torch_build(py)
    index = os.environ.get("PERFLAB_TORCH_INDEX")
    pip = [py, "-m", "pip", "install", "--disable-pip-version-check"]

    if have and (choice == "keep" or (choice == "auto" and not (gpu and have == "cpu"))):
        say(f"keeping the torch already installed ({have} build)")
        return
    want = choice if choice in {"cpu", "cuda"} else ("cuda" if gpu else "cpu")
    if have == "cpu" and want == "cuda":
        say("torch here is a CPU build but an NVIDIA GPU is present: installing a CUDA build "
            "(set PERFLAB_TORCH=keep to keep the CPU build)")
    if index:
        run(pip + ["torch", "--index-url", index])
    elif want == "cuda":
        # PyPI's Linux wheels of torch are CUDA builds; a local CPU wheel (which a pip configured
        # with a wheel folder would prefer: '+cpu' sorts above the plain version) is excluded.
        run(pip + (["--upgrade", "--force-reinstall"] if have else []) + [f"torch>=2.1,!={CPU_TORCH}+cpu"])
    elif platform.system() == "Darwin":
        run(pip + [f"torch=={CPU_TORCH}"])
    else:
        # First a local wheel folder (pip's find-links), without touching any CUDA wheel...
        first = run(pip + [f"torch=={CPU_TORCH}+cpu"], check=False)
        if first.returncode != 0:
            # ...then PyTorch's own CPU index, which holds only CPU builds.
            run(pip + [f"torch=={CPU_TORCH}+cpu", "--extra-index-url", CPU_INDEX])
    got = torch_build(py)
    if got is None:
        sys.exit("[setup] torch did not install; see pip's message above")
    if want == "cuda" and got != "cuda":
        say(f"warning: a {got} build of torch was installed although a CUDA build was wanted; install one with "
            "PERFLAB_TORCH_INDEX=https://download.pytorch.org/whl/cu128 make setup")
    say(f"torch installed ({got} build)")


def shares_system_packages(venv_dir: Path) -> bool:
    cfg = venv_dir / "pyvenv.cfg"
    text = cfg.read_text().lower() if cfg.exists() else ""
    return "include-system-site-packages = true" in text


def install_spec(extras: list[str]) -> str:
    """What pip installs: this checkout, editable, with dev and the extras asked for."""
    return f"{ROOT}[{','.join(['dev', *[e for e in extras if e != 'dev']])}]"


def parse_extras(text: str) -> list[str]:
    """'course,test' -> ['course', 'test']; an extra pyproject.toml does not define stops the setup."""
    import re

    names = [e.strip() for e in text.split(",") if e.strip()]
    pyproject = (ROOT / "pyproject.toml").read_text()
    section = pyproject.split("[project.optional-dependencies]", 1)[-1].split("\n[", 1)[0]
    known = set(re.findall(r"^([A-Za-z0-9_-]+)\s*=\s*\[", section, re.M))
    unknown = [e for e in names if e not in known]
    if unknown:
        sys.exit(f"[setup] no extra {', '.join(unknown)} in pyproject.toml: choose from {', '.join(sorted(known))}")
    return names


def install_project(py: str, venv_dir: Path, extras: list[str] | None = None) -> None:
    """perflab and its dependencies: with uv when it can be used, else (or if it fails) with pip."""
    choice = os.environ.get("PERFLAB_INSTALLER", "auto").lower()
    if choice not in {"auto", "uv", "pip"}:
        sys.exit(f"[setup] PERFLAB_INSTALLER must be auto, uv or pip (got {choice!r})")
    offline = os.environ.get("PIP_NO_INDEX", "").lower() in {"1", "true", "yes", "on"}
    # uv reads neither pip's configuration (its indexes, its offline wheel folder) nor, reliably, a
    # shared system site-packages: there the CUDA torch could look missing and be fetched again.
    if choice == "uv" or (choice == "auto" and not offline and not shares_system_packages(venv_dir)):
        got_uv = run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "uv"], check=False).returncode == 0
        if got_uv and run([py, "-m", "uv", "pip", "install", "--python", py, "--compile-bytecode",
                           "-e", install_spec(extras or [])], check=False).returncode == 0:
            return
        say("uv could not install the dependencies; pip installs them instead")
    run([py, "-m", "pip", "install", "--disable-pip-version-check", "-e", install_spec(extras or [])])


def quiet_jupyterlab(venv_dir: Path) -> None:
    """Turn off JupyterLab's news and update checks in this environment: they reach out to the
    internet and their pop-up covers the notebook."""
    import json

    settings = venv_dir / "share" / "jupyter" / "lab" / "settings"
    settings.mkdir(parents=True, exist_ok=True)
    path = settings / "overrides.json"
    current = json.loads(path.read_text()) if path.exists() else {}
    current.setdefault("@jupyterlab/apputils-extension:notification", {}).update(
        {"fetchNews": "false", "checkForUpdates": False})
    path.write_text(json.dumps(current, indent=2) + "\n")


def spawn(cmd: list[str]) -> subprocess.Popen:
    """Start `cmd` in the background; its output is kept (proc.log) and shown only if it fails."""
    say("$ " + " ".join(cmd) + " &")
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    proc.log = log  # pyright: ignore[reportAttributeAccessIssue]  (a note for finish_chromium_install)
    return proc


def start_chromium_install() -> subprocess.Popen | None:
    """Start installing Debian's chromium for the browser test (tests/notebooks/test_browser.py) where this
    user can: root with apt-get (a CI machine, a container). It runs while torch and the packages
    install (about 150 packages, 200 MB, without recommended ones). Nothing happens when a chromium
    is already there (PERFLAB_CHROMIUM names another one); elsewhere the test is skipped with one
    line, except under CI, where it fails."""
    if Path(os.environ.get("PERFLAB_CHROMIUM", "/usr/bin/chromium")).exists():
        return None
    if os.name != "posix" or os.geteuid() != 0 or not shutil.which("apt-get"):
        say("chromium not installed (that needs root and apt-get): the browser test will be skipped")
        return None
    quiet = "-qq -o Dpkg::Use-Pty=0"
    return spawn(["sh", "-c", f"apt-get update {quiet} && "
                              f"apt-get install -y {quiet} --no-install-recommends chromium"])


def finish_chromium_install(proc: subprocess.Popen | None, started: float) -> None:
    if proc is None:
        return
    ok = proc.wait() == 0
    log = getattr(proc, "log", None)
    if not ok and log is not None:
        log.seek(0)
        print(log.read().decode(errors="replace")[-2000:], flush=True)
    say(f"chromium {'installed' if ok else 'could not be installed (apt-get above): the browser test will be skipped, or fail under CI'}"
        f" ({time.monotonic() - started:.0f} s after it started, alongside the packages)")


def install_bubblewrap() -> None:
    """bubblewrap for `perflab grade`'s sandbox (perflab/classroom/sandbox.py), where this user can install
    it: root with apt-get (a CI machine, a container), so that the grader's tests run confined there.
    Quiet, bounded in time, and never a failure: without it `perflab grade` says what to install."""
    if shutil.which("bwrap") or not sys.platform.startswith("linux"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        say("bubblewrap not installed (that needs root and apt-get): perflab grade will ask for it or --no-sandbox")
        return
    quiet = ["-qq", "-o", "Dpkg::Use-Pty=0"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "install", "-y", *quiet, "--no-install-recommends", "bubblewrap"],
                ["sh", "-c", "apt-get update -qq && apt-get install -y -qq --no-install-recommends bubblewrap"]):
        try:
            subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=300, env=env)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if shutil.which("bwrap"):
            say("bubblewrap installed: perflab grade confines each learner")
            return
    say("bubblewrap could not be installed (apt-get): perflab grade will ask for it or --no-sandbox")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--venv", default=str(ROOT / ".venv"), help="where the environment goes")
    ap.add_argument("--force", action="store_true", help="reinstall even if up to date")
    ap.add_argument("--extras", default="course,kernels,test,site,hta",
                    help="perflab's extras to install besides its dependencies (default: course,kernels,test,site,hta)")
    args = ap.parse_args()
    extras = parse_extras(args.extras)

    if sys.version_info < (3, 10):
        sys.exit(f"[setup] perflab needs Python 3.10 or newer; this is {platform.python_version()}")
    venv_dir = Path(args.venv).resolve()
    py = venv_python(venv_dir)
    stamp_file = venv_dir / ".perflab-setup"
    stamp = stamp_file.read_text().split() if stamp_file.exists() else []
    have = set(stamp[1].split(",")) if len(stamp) > 1 else set()
    if not args.force and stamp and stamp[0] == stamp_of() and set(extras) <= have:
        say(f"environment {venv_dir} is up to date")
        install_bubblewrap()  # a machine set up before the grader's sandbox
        return
    if stamp and stamp[0] == stamp_of():
        extras = sorted(set(extras) | have)  # keep what an earlier setup installed

    chromium_started, chromium = time.monotonic(), start_chromium_install()
    gpu = has_nvidia_gpu()
    say(f"NVIDIA GPU: {'yes' if gpu else 'no'}")
    if not Path(py).exists():
        # Reuse a CUDA torch that the running Python already has instead of downloading it.
        reuse = torch_build(sys.executable) in {"cuda", "rocm"}
        say(f"creating {venv_dir}" + (" (sharing this Python's CUDA torch)" if reuse else ""))
        venv.EnvBuilder(with_pip=True, system_site_packages=reuse).create(venv_dir)

    install_torch(py, gpu)
    install_project(py, venv_dir, extras)
    # The pynvml shim (pulled in by ipyexperiments) only re-exports nvidia-ml-py's module and
    # makes every `import torch` warn; remove it so the real module is what gets imported.
    run([py, "-m", "pip", "uninstall", "-y", "--disable-pip-version-check", "pynvml"], check=False)
    run([py, "-c", "import torch, perflab; print('torch', torch.__version__, '| perflab', perflab.__version__)"])
    quiet_jupyterlab(venv_dir)
    finish_chromium_install(chromium, chromium_started)
    install_bubblewrap()
    stamp_file.write_text(f"{stamp_of()} {','.join(sorted(extras)) or '-'}\n")
    say("done")


if __name__ == "__main__":
    main()
