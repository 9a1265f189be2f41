"""`make lab`'s server: listens on 127.0.0.1 only and refuses requests without its token."""

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_lab_server_needs_token_and_is_local(tmp_path):
    from tests.repo.test_packaging import _lab_command

    port = _free_port()
    cmd = shlex.split(_lab_command())
    cmd = [c for c in cmd if not c.startswith("--ServerApp.port=")] + [f"--ServerApp.port={port}"]
    cmd[0] = str(Path(sys.executable).parent / "jupyter")
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "rt"), JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"),
               JUPYTER_DATA_DIR=str(tmp_path / "data"))
    log = tmp_path / "lab.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        token = None
        deadline = time.time() + 90
        while time.time() < deadline and token is None:
            time.sleep(0.5)
            assert proc.poll() is None, log.read_text()[-2000:]
            m = re.search(r"http://127\.0\.0\.1:(\d+)/\S*\?token=([0-9a-f]{16,})", log.read_text())
            if m:  # the port it printed: Jupyter moves to the next port when another process took this one
                port, token = int(m.group(1)), m.group(2)
        assert token, "server printed no token URL:\n" + log.read_text()[-2000:]
        base = f"http://127.0.0.1:{port}"
        for _ in range(40):  # the URL can be printed a moment before the socket accepts
            try:
                urllib.request.urlopen(f"{base}/api/contents", timeout=10)
                raise AssertionError("the server answered a request without its token")
            except urllib.error.HTTPError as err:
                assert err.code == 403, err
                break
            except urllib.error.URLError:
                time.sleep(0.25)
        else:
            raise AssertionError("the server never answered on its printed port:\n" + log.read_text()[-2000:])
        with urllib.request.urlopen(f"{base}/api/contents?token={token}", timeout=10) as r:
            names = {item["name"] for item in json.load(r)["content"]}
        assert {"notebooks", "labs", "README.md"} <= names
        # bound to loopback only: nothing answers on the machine's other addresses
        others = {a[4][0] for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)} - {"127.0.0.1"}
        others = {a for a in others if not a.startswith("127.")}
        for addr in others:
            with socket.socket() as s:
                s.settimeout(2)
                assert s.connect_ex((addr, port)) != 0, f"server reachable on {addr}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
