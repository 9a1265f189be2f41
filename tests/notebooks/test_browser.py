"""The course as a learner meets it: JupyterLab served as `make lab` serves it, driven by a real browser.

Chromium (Debian's package, which tools/setup_env.py installs where it can) is driven by the
`playwright` package; no browser is downloaded. Where chromium is missing the test is skipped with
one line, except under CI (CI=true), where a skipped browser test would hide a broken course: there
it fails.

The lessons in EVERY_CHANGE (under `make test`), every lesson with PERFLAB_BROWSER_LESSONS=all
(`make test-browser`), or those named there (e.g. `01,04`), are each opened from a copy whose
parameters are set to smoke mode the way papermill sets them (an injected cell after the
`parameters` cell): the shipped notebooks stay untouched and the browser sees what `make test`'s
papermill runs see, only through the front end. Lessons run two at a time, a test per pair (Run →
Run All Cells).
Once both have finished, each must show no error, nothing on stderr, no cut table cell and no table
wider than the notebook's cells (at the test's 1,400 px window); then the
first control of its first panel (`perflab.course.widgets.Panel`, CSS class `perflab-panel`) is
moved as a learner moves it (a slider with the keyboard, a drop-down to its next option) and the
test waits for the panel to redraw. The browser console may log no error. A request without the
token, or with a wrong one, is refused.

Screenshots of every step go to the test's temporary folder; their paths are printed on failure.
The time from each change to the redrawn panel is printed (a panel that does not redraw within
15 s fails the test).
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

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("PERFLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
# One test (one JupyterLab start, about 6 s here), marked `notebooks`: tests/conftest.py puts it in
# the lessons' xdist group, on the worker that runs the lessons one after another, never beside one.
pytestmark = pytest.mark.notebooks
STEP_TIMEOUT_MS = 30_000  # opening a lesson, starting its kernel
RUN_TIMEOUT_MS = 90_000  # Run All Cells of one lesson in smoke mode (10-30 s here, two lessons at once)
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
    for name in LESSONS:
        _smoke_copy(ROOT / "notebooks" / name, root / "notebooks" / name)
    home = tmp_path_factory.mktemp("home")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), JUPYTERLAB_SETTINGS_DIR=str(home / "settings"))
    for name in ("JUPYTER_TOKEN", "MPLBACKEND"):  # a learner's kernel: Jupyter's own token, inline figures
        env.pop(name, None)
    # no line coverage in the server and its kernels: tests/notebooks/test_notebooks.py measures the lessons'
    # code already, and under the tracer the server and every lesson here run slower
    for name in ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START"):
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
    .map(e => e.textContent.trim()).filter(t => t.length && (t.includes('Traceback') || t.includes('Error')))"""
# (a panel's "⚠ ..." line is its designed one-line refusal, which a lesson may show on purpose; the
# panel the test moves must not end in one)
_WIDGET_FAILED = """(root) => Array.from(document.querySelectorAll(root + ' .jp-OutputArea-output'))
    .map(e => e.textContent).filter(t => t.includes('Error displaying widget') || t.includes('Loading widget...'))"""
_STDERR = """(root) => Array.from(document.querySelectorAll(
    root + ' [data-mime-type="application/vnd.jupyter.stderr"]'))
    .map(e => e.textContent.trim()).filter(t => t.length)"""
# a table cell whose text was cut ("…" or pandas' "..."), outside the code itself
_CUT = """(root) => Array.from(document.querySelectorAll(root + ' .jp-OutputArea td, ' + root + ' .jp-OutputArea th'))
    .map(e => e.textContent.trim()).filter(t => t.endsWith('…') || t.endsWith('...'))"""
# a table wider than the notebook's cells (the learner would scroll sideways to read it): its width,
# the cell's, and its first column headers to name it
_WIDE = """(root) => Array.from(document.querySelectorAll(root + ' .jp-OutputArea-output table')).map(t => {
    const cell = t.closest('.jp-Cell'); const w = Math.round(t.getBoundingClientRect().width);
    const room = cell ? Math.round(cell.getBoundingClientRect().width) : 0;
    const head = Array.from(t.querySelectorAll('th')).slice(0, 4).map(h => h.textContent.trim()).join(' | ');
    return {w, room, head}; }).filter(x => x.room > 0 && x.w > x.room)"""
# what a panel shows: its output area (figure, table, text), and its controls' values
_PANEL = """([root, i]) => { const p = document.querySelectorAll(root + ' .perflab-panel')[i];
    if (!p) return null; const out = p.querySelector('.widget-output');
    const vals = Array.from(p.querySelectorAll('.widget-readout, select, input')).map(e => e.value !== undefined
        && e.tagName !== 'DIV' ? String(e.value) + (e.checked ? '+' : '') : e.textContent.trim());
    return {out: out ? out.innerHTML : '', text: out ? out.textContent : '', controls: vals.join('|'),
            busy: out ? /^\\s*…/.test(out.textContent) && !out.querySelector('img, table') : false}; }"""
# (a Panel made with busy="..." shows "… <what it does>" at once while it works: not yet redrawn)


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


def _front(page, name: str) -> None:
    page.locator("#jp-main-dock-panel .lm-TabBar-tab", has_text=name).click()  # its tab in front


def _check_ran(page, name: str, root: str, steps: Steps) -> None:
    """Wait until every code cell of the lesson has run; no cell may show an error, print to stderr,
    or cut a table cell."""
    _front(page, name)
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
    stderr = page.evaluate(_STDERR, root)
    assert not stderr, f"{name}: a cell printed to stderr (the learner sees it on red): {stderr[0][:500]}\n{steps.where()}"
    cut = page.evaluate(_CUT, root)
    assert not cut, f"{name}: a table cell is cut: {cut[0][:200]!r}\n{steps.where()}"
    wide = page.evaluate(_WIDE, root)
    assert not wide, (f"{name}: a table is wider than the notebook ({wide[0]['w']} px in a {wide[0]['room']} px cell; "
                      f"columns {wide[0]['head']!r})\n{steps.where()}")
    # the injected smoke=True cell ran after the parameters cell: start() says which mode it sized for
    assert "smoke mode (tiny sizes" in page.locator(root).text_content(), \
        f"{name}: the lesson did not run in smoke mode (the injected parameters did not take effect)\n{steps.where()}"


def _move(panel, page) -> tuple[str, float]:
    """Change the panel's first control as a learner would: a slider one step with the keyboard, a
    drop-down to its next option, a checkbox or radio button clicked. Returns what was done, and
    when (perf_counter) the change that took effect was made."""
    handle = panel.locator(".noUi-handle")
    if handle.count():
        h = handle.first
        readout = panel.locator(".widget-readout").first
        before = readout.text_content()
        h.focus()
        for key in ("ArrowRight", "ArrowLeft", "ArrowLeft"):  # at its maximum, a slider moves left
            at = time.perf_counter()
            page.keyboard.down(key)
            page.keyboard.up(key)
            page.wait_for_timeout(100)
            if readout.text_content() != before:
                return f"slider {before.strip()} → {readout.text_content().strip()}", at
        return "slider did not move", time.perf_counter()
    select = panel.locator("select")
    if select.count():
        s = select.first
        options = s.locator("option").all_text_contents()
        current = s.input_value()
        labels = [o for o in options if o != current] or options
        at = time.perf_counter()
        s.select_option(label=labels[0])
        return f"drop-down {current} → {labels[0]}", at
    box = panel.locator("input[type=checkbox], input[type=radio]:not(:checked), .widget-toggle-button:not(.mod-active)")
    if box.count():
        at = time.perf_counter()
        box.first.click()
        return "clicked a toggle", at
    raise AssertionError("the panel has no slider, drop-down or toggle to move")


def _move_widget(page, name: str, root: str, steps: Steps) -> float:
    """Move the lesson's first panel's first control; return the seconds from the change to the redraw."""
    _front(page, name)
    page.wait_for_function(f"(r) => ({_PANEL})([r, 0]) !== null", arg=root, timeout=STEP_TIMEOUT_MS)
    failed = page.evaluate(_WIDGET_FAILED, root)
    assert not failed, f"{name}: a widget did not render: {failed[0][:200]}\n{steps.where()}"
    panel = page.locator(f"{root} .perflab-panel").first
    panel.scroll_into_view_if_needed()
    page.wait_for_function(f"(r) => {{ const s = ({_PANEL})([r, 0]); return s && s.out.length > 0 && !s.busy; }}",
                           arg=root, timeout=STEP_TIMEOUT_MS)
    before = page.evaluate(_PANEL, [root, 0])
    steps.shot(f"{name}_panel_before", panel)
    did, moved = _move(panel, page)
    try:
        page.wait_for_function(f"""([r, old]) => {{ const s = ({_PANEL})([r, 0]);
            return s && !s.busy && s.out !== old; }}""", arg=[root, before["out"]], timeout=REDRAW_TIMEOUT_MS)
    except Exception as e:
        steps.shot(f"{name}_no_redraw", panel)
        raise AssertionError(f"{name}: the panel did not redraw within {REDRAW_TIMEOUT_MS / 1000:.0f} s after "
                             f"{did} ({e.__class__.__name__})\n{steps.where()}") from None
    redraw = time.perf_counter() - moved
    page.wait_for_timeout(200)
    after = page.evaluate(_PANEL, [root, 0])
    steps.shot(f"{name}_panel_after", panel)
    assert after["controls"] != before["controls"], f"{name}: the control did not change ({did})\n{steps.where()}"
    errors = page.evaluate(_ERRORS, root)
    assert not errors, f"{name}: after {did}, the panel shows an error: {errors[0][:500]}\n{steps.where()}"
    assert not after["text"].strip().startswith("⚠"), f"{name}: after {did}, the panel refused: {after['text'][:300]}"
    print(f"{name}: {did}: redrawn {redraw:.2f} s later")
    return redraw


def _shut_down(lab, name: str) -> None:
    """Stop the lesson's kernel (two at a time on two cores), as File → Shut Down would."""
    import json

    base, token = lab["base"], lab["token"]
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as r:
        sessions = json.load(r)
    for s in sessions:
        if s.get("path", "").endswith(name):
            req = urllib.request.Request(f"{base}/api/sessions/{s['id']}?token={token}", method="DELETE")
            urllib.request.urlopen(req, timeout=10).close()


# The lessons a newcomer opens first, and the ones that drive the most machinery (Triton tiles,
# the capstone's ladder): `make test` drives these in the browser on every change; the rest run with
# PERFLAB_BROWSER_LESSONS=all (`make test-browser`), which every lesson passes.
EVERY_CHANGE = "00,01,04,11"


def _lessons() -> list[str]:
    """The lessons to drive: $PERFLAB_BROWSER_LESSONS (comma-separated prefixes such as 01,04, or
    `all`), else EVERY_CHANGE."""
    every = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    want = os.environ.get("PERFLAB_BROWSER_LESSONS", "").strip() or EVERY_CHANGE
    if want != "all":
        keep = {w.strip() for w in want.split(",") if w.strip()}
        every = [n for n in every if n.split("_", 1)[0] in keep]
    return every


LESSONS = _lessons()
PAIRS = [LESSONS[i:i + 2] for i in range(0, len(LESSONS), 2)]


def test_the_server_wants_its_token(lab):
    _check_token_is_required(lab)


@pytest.fixture(scope="module")
def page(lab):
    """One browser for the module; each test opens its lessons in it."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            pg = browser.new_page(viewport={"width": 1400, "height": 1200})
            pg.console_errors = []  # type: ignore[attr-defined]
            pg.on("console", lambda m: pg.console_errors.append(f"console {m.type}: {m.text}")  # type: ignore[attr-defined]
                  if m.type == "error" else None)
            pg.on("pageerror", lambda e: pg.console_errors.append(f"page error: {e}"))  # type: ignore[attr-defined]
            yield pg
        finally:
            browser.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: "+".join(n[:2] for n in p))
def test_lessons_in_a_real_browser(lab, page, pair, tmp_path):
    """Two lessons at a time (two kernels on two cores): both start, then each is checked and its
    widget moved once both have finished, so a redraw never shares the CPU with a running lesson;
    then both kernels stop."""
    t0 = time.perf_counter()
    page.console_errors.clear()
    steps = Steps(page, tmp_path)
    redraw: dict[str, float] = {}
    try:
        roots = {}
        for name in pair:
            roots[name] = _open(page, lab, name, first=name == pair[0])
            _run_all(page, roots[name])
        for name in pair:
            _check_ran(page, name, roots[name], steps)
        for name in pair:
            redraw[name] = _move_widget(page, name, roots[name], steps)
    except Exception:
        steps.shot("failure")
        print(steps.where())
        raise
    finally:
        for name in pair:
            _shut_down(lab, name)
    assert not page.console_errors, ("the browser console reported errors:\n" + "\n".join(page.console_errors[:10])
                                     + "\n" + steps.where())
    print("change → redrawn panel: " + ", ".join(f"{n[:2]} {s:.2f} s" for n, s in redraw.items())
          + f"; {time.perf_counter() - t0:.1f} s for the pair")
