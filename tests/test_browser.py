"""The course as a learner meets it: JupyterLab served as `make lab` serves it, driven by a real browser.

Chromium (Debian's package, which tools/setup_env.py installs where it can) is driven by the
`playwright` package; no browser is downloaded. Where chromium is missing the test is skipped with
one line, except under CI (CI=true), where a skipped browser test would hide a broken course: there
it fails.

Lessons 01 and 04 are opened from copies whose parameters are set to smoke mode the way papermill
sets them (an injected cell after the `parameters` cell): the shipped notebooks stay untouched and
the browser sees what `make test`'s papermill runs see, only through the front end. Each lesson is
run in full (Run → Run All Cells; the second starts while the first still runs); once both have
finished, a slider of each is moved with the keyboard (the arrow key on the focused handle,
released) and the test waits for the slider's readout, the panel's table and its figure to change.
No cell may show an error and the browser console may log no error. A request without the token,
or with a wrong one, is refused.

Screenshots of every step go to the test's temporary folder; their paths are printed on failure.
The time from releasing the slider to the redrawn figure is printed (about 0.3-1 s here in smoke
mode; a figure that is not redrawn within 15 s fails the test).
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("PERFLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
# One test (one JupyterLab start, about 6 s here), marked `notebooks`: tests/conftest.py puts it in
# the lessons' xdist group, on the worker that runs the lessons one after another, never beside one.
pytestmark = pytest.mark.notebooks
STEP_TIMEOUT_MS = 30_000  # opening a lesson, starting its kernel
RUN_TIMEOUT_MS = 45_000  # Run All Cells of one lesson in smoke mode (about 12 s here)
REDRAW_TIMEOUT_MS = 15_000  # slider release → redrawn figure (well under 1 s here)


def _missing() -> str | None:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install playwright)"
    if not Path(CHROMIUM).exists():
        return f"no chromium at {CHROMIUM} (apt-get install chromium, or set PERFLAB_CHROMIUM)"
    return None


@pytest.fixture(scope="module")
def browser_ready():
    why = _missing()
    if why:
        if IN_CI:
            pytest.fail(f"browser test cannot run under CI: {why}")
        pytest.skip(f"browser test skipped: {why}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _smoke_copy(src: Path, dst: Path) -> None:
    """`src` with smoke=True injected after its parameters cell, as papermill does it."""
    import nbformat

    nb = nbformat.read(src, as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", []))
    cell = nbformat.v4.new_code_cell("# Parameters (injected, as papermill injects them)\nsmoke = True")
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(at + 1, cell)
    dst.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dst)


@pytest.fixture(scope="module")
def lab(browser_ready, tmp_path_factory):
    """JupyterLab as `make lab` starts it (127.0.0.1, a free port, Jupyter's own random token)."""
    root = tmp_path_factory.mktemp("course")
    for name in ("01_flops.ipynb", "04_tiles_and_waves.ipynb"):
        _smoke_copy(ROOT / "notebooks" / name, root / "notebooks" / name)
    home = tmp_path_factory.mktemp("home")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), JUPYTERLAB_SETTINGS_DIR=str(home / "settings"))
    for name in ("JUPYTER_TOKEN", "MPLBACKEND"):  # a learner's kernel: Jupyter's own token, inline figures
        env.pop(name, None)
    port = _free_port()
    cmd = [sys.executable, "-m", "jupyter", "lab", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
           "--ServerApp.port_retries=0", "--ServerApp.open_browser=False", "--LabApp.news_url=None",
           f"--ServerApp.root_dir={root}"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    log = root.parent / f"jupyterlab-{port}.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=root)
    try:
        url = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            m = re.search(rf"(http://127\.0\.0\.1:{port}/lab\?token=[0-9a-f]+)", log.read_text())
            if m:
                url = m.group(1)
                break
            time.sleep(0.2)
        assert url, f"JupyterLab did not start (log: {log}):\n{log.read_text()[-2000:]}"
        yield {"url": url, "base": f"http://127.0.0.1:{port}", "token": url.split("token=")[1], "root": root,
               "log": log}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def _check_token_is_required(lab) -> None:
    """The server answers only with make lab's token: none, or a wrong one, is refused."""
    assert len(lab["token"]) >= 32, "make lab's token should be Jupyter's random one"
    for path in ("/api/contents", "/api/kernels", "/api/sessions"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(lab["base"] + path, timeout=10)
        assert e.value.code == 403, f"{path} without a token answered {e.value.code}"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(lab["base"] + "/api/contents?token=" + secrets.token_hex(24), timeout=10)
    assert e.value.code == 403, "a wrong token must be refused too"
    with urllib.request.urlopen(lab["base"] + "/api/contents?token=" + lab["token"], timeout=10) as r:
        assert r.status == 200


class Steps:
    """Screenshots of each step, listed on failure."""

    def __init__(self, page, folder: Path):
        self.page, self.folder, self.paths = page, folder, []

    def shot(self, name: str, element=None) -> None:
        """The page as seen, or only `element` (all of it, scrolled into view)."""
        p = self.folder / f"{len(self.paths):02d}_{name}.png"
        try:
            (element or self.page).screenshot(path=str(p))
            self.paths.append(p)
        except Exception as e:  # a screenshot that fails must not hide the real failure
            print(f"screenshot {p} failed: {e}")

    def where(self) -> str:
        return "screenshots:\n" + "\n".join(f"  {p}" for p in self.paths)


# JavaScript run in the page: the state the assertions read, always inside one notebook (`root`, the
# CSS selector of its panel). A lesson opened earlier stays open in a hidden tab: a page-wide query
# would read its cells too.
_PROMPTS = """(root) => Array.from(document.querySelectorAll(root + ' .jp-CodeCell .jp-InputPrompt'))
    .map(e => e.textContent.trim())"""
_ERRORS = """(root) => Array.from(document.querySelectorAll(
    root + ' [data-mime-type="application/vnd.jupyter.error"], ' + root + ' .jupyter-widgets .jp-RenderedText'))
    .map(e => e.textContent.trim()).filter(t => t.length && (t.includes('Traceback') || t.includes('Error')
        || t.startsWith('⚠')))"""
_WIDGET_FAILED = """(root) => Array.from(document.querySelectorAll(root + ' .jp-OutputArea-output'))
    .map(e => e.textContent).filter(t => t.includes('Error displaying widget') || t.includes('Loading widget...'))"""
_PANEL_IMG = """([root, title]) => { const v = Array.from(document.querySelectorAll(root + ' .widget-vbox'))
    .find(e => e.textContent.includes(title));
    const img = v && v.querySelector('.widget-output img'); return img ? img.getAttribute('src') : null; }"""


def _panel_state(panel) -> dict:
    img = panel.locator(".widget-output img")
    table = panel.locator(".widget-output table")
    return {"slider": panel.locator(".widget-readout").first.text_content().strip(),
            "img": img.first.get_attribute("src") if img.count() else None,
            "table": table.first.text_content() if table.count() else ""}


def _open(page, lab, name: str, first: bool) -> str:
    """Open lesson `name` as a learner does; return the CSS selector of its notebook panel."""
    if first:  # `reset`: a fresh workspace, nothing restored from an earlier run
        page.goto(f"{lab['base']}/lab/tree/notebooks/{name}?reset&token={lab['token']}", timeout=STEP_TIMEOUT_MS)
    else:  # from the file browser, in the same page: no second load of JupyterLab
        page.locator("#filebrowser .jp-DirListing-item", has_text=name).dblclick(timeout=STEP_TIMEOUT_MS)
    tab = page.locator("#jp-main-dock-panel .lm-TabBar-tab", has_text=name)
    tab.wait_for(timeout=STEP_TIMEOUT_MS)
    root = "#" + tab.get_attribute("data-id")
    # the kernel has started: the status bar (it follows the active notebook) and the notebook's own
    # execution indicator read idle
    page.wait_for_function("""(root) => { const bar = document.querySelector('#jp-main-statusbar');
        const own = document.querySelector(root + ' .jp-Notebook-ExecutionIndicator');
        return bar && /\\|\\s*Idle/.test(bar.textContent) && own && own.dataset.status === 'idle'
            && document.querySelectorAll(root + ' .jp-CodeCell').length > 1; }""", arg=root, timeout=STEP_TIMEOUT_MS)
    return root


def _run_all(page, root: str) -> None:
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()


def _check_ran(page, name: str, root: str, steps: Steps) -> None:
    """Wait until every code cell of the lesson has run; no cell may show an error."""
    page.locator("#jp-main-dock-panel .lm-TabBar-tab", has_text=name).click()  # its tab in front
    try:  # every code cell has run when every prompt shows a number and none shows [*]
        page.wait_for_function(f"""(root) => {{ const p = ({_PROMPTS})(root);
            return p.length > 0 && p.every(t => /\\[\\d+\\]/.test(t)); }}""", arg=root, timeout=RUN_TIMEOUT_MS)
    except Exception as e:
        steps.shot(f"{name}_not_run")
        raise AssertionError(f"{name}: not every cell ran within {RUN_TIMEOUT_MS / 1000:.0f} s "
                             f"(prompts: {' '.join(page.evaluate(_PROMPTS, root))}; {e.__class__.__name__})\n"
                             f"{steps.where()}") from None
    steps.shot(f"{name}_ran")
    errors = page.evaluate(_ERRORS, root)
    assert not errors, f"{name}: a cell shows an error: {errors[0][:500]}\n{steps.where()}"
    # the injected smoke=True cell ran after the parameters cell: start() says which mode it sized for
    assert "smoke mode (tiny sizes" in page.locator(root).text_content(), \
        f"{name}: the lesson did not run in smoke mode (the injected parameters did not take effect)\n{steps.where()}"


def _move_slider(page, name: str, root: str, panel_title: str, steps: Steps) -> float:
    """Move the panel's first slider one step with the keyboard; return release → redrawn figure (s)."""
    page.locator("#jp-main-dock-panel .lm-TabBar-tab", has_text=name).click()
    panel = page.locator(f"{root} .widget-vbox", has=page.get_by_text(panel_title, exact=True)).first
    panel.scroll_into_view_if_needed()
    page.wait_for_function(_PANEL_IMG, arg=[root, panel_title], timeout=STEP_TIMEOUT_MS)
    failed = page.evaluate(_WIDGET_FAILED, root)
    assert not failed, f"{name}: a widget did not render: {failed[0][:200]}\n{steps.where()}"
    before = _panel_state(panel)
    steps.shot(f"{name}_panel_before", panel)
    handle = panel.locator(".noUi-handle").first
    handle.focus()
    page.keyboard.down("ArrowRight")
    page.keyboard.up("ArrowRight")
    released = time.perf_counter()
    try:
        page.wait_for_function(f"""([root, title, src]) => {{ const now = ({_PANEL_IMG})([root, title]);
            return now && now !== src; }}""", arg=[root, panel_title, before["img"]], timeout=REDRAW_TIMEOUT_MS)
    except Exception as e:
        steps.shot(f"{name}_no_redraw", panel)
        raise AssertionError(
            f"{name}: the figure of '{panel_title}' did not redraw within {REDRAW_TIMEOUT_MS / 1000:.0f} s after "
            f"the slider moved from {before['slider']} to {_panel_state(panel)['slider']} "
            f"({e.__class__.__name__})\n{steps.where()}") from None
    redraw = time.perf_counter() - released
    page.wait_for_timeout(200)  # the table is drawn in the same output update; let layout settle
    after = _panel_state(panel)
    steps.shot(f"{name}_panel_after", panel)
    assert after["slider"] != before["slider"], f"{name}: the slider's readout did not change\n{steps.where()}"
    assert after["img"] != before["img"], f"{name}: the figure did not change\n{steps.where()}"
    if before["table"]:
        assert after["table"] != before["table"], f"{name}: the panel's table did not change\n{steps.where()}"
    errors = page.evaluate(_ERRORS, root)
    assert not errors, f"{name}: after the slider moved, the panel shows an error: {errors[0][:500]}\n{steps.where()}"
    print(f"{name}: slider {before['slider']} → {after['slider']}: figure redrawn {redraw:.2f} s after release")
    return redraw


LESSONS = {"01_flops.ipynb": "matmul on the roofline", "04_tiles_and_waves.ipynb": "Tiles and waves (model)"}


@pytest.mark.timeout(180)
def test_lessons_01_and_04_in_a_real_browser(lab, tmp_path):
    from playwright.sync_api import sync_playwright

    _check_token_is_required(lab)
    t0 = time.perf_counter()
    console_errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1200})
            page.on("console", lambda m: console_errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: console_errors.append(f"page error: {e}"))
            steps = Steps(page, tmp_path)
            try:
                # Both lessons start at once (the second opens and runs while the first still runs:
                # two kernels on two cores); the sliders move only once both have finished, so the
                # redraw times are not shared with a running lesson.
                roots, marks = {}, []
                for i, name in enumerate(LESSONS):
                    roots[name] = _open(page, lab, name, first=i == 0)
                    steps.shot(f"{name}_opened")
                    _run_all(page, roots[name])
                    marks.append(f"{name} running at {time.perf_counter() - t0:.1f} s")
                for name in reversed(LESSONS):
                    _check_ran(page, name, roots[name], steps)
                    marks.append(f"{name} ran at {time.perf_counter() - t0:.1f} s")
                redraw = {name: _move_slider(page, name, roots[name], title, steps) for name, title in LESSONS.items()}
                marks.append(f"sliders done at {time.perf_counter() - t0:.1f} s")
            except Exception:
                steps.shot("failure")
                print(steps.where())
                raise
        finally:
            browser.close()
    assert not console_errors, "the browser console reported errors:\n" + "\n".join(console_errors[:10]) + "\n" + steps.where()
    r01, r04 = redraw.values()
    print(f"slider release → redrawn figure: lesson 01 (measures a matmul live) {r01:.2f} s, "
          f"lesson 04 (model only) {r04:.2f} s; whole browser run {time.perf_counter() - t0:.1f} s ({'; '.join(marks)})")
    print(steps.where())
