#!/usr/bin/env python3
"""Build the course as a static site: every lesson with its outputs, an index that mirrors the
README's course map, and on every page the device that produced its figures.

    python tools/site.py                          # all lessons, executed here in smoke mode → _site/
    python tools/site.py --lessons 00 04          # some lessons
    python tools/site.py --executed DIR           # reuse executed copies (e.g. $PERFLAB_EXECUTED of the tests)
    python tools/site.py --no-execute             # the lessons as written, without outputs (fast)

(`make site` runs the first.) The site is built with MkDocs, the Material theme and mkdocs-jupyter,
all from PyPI and all building offline: nothing is fetched at build time or when the pages are
read (no web fonts, no CDN scripts, `use_directory_urls: false` so the pages also work from
`file://`, display math converted to MathML, which browsers draw without MathJax). Links between lessons are rewritten to the lessons' pages; links to files that are
not on the site (labs, data/) become the file's path in the repository. `mkdocs build --strict`
turns every warning (a missing file or link) into a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
MEASURED = re.compile(r"Measured on: ([^\n]+)")


# ---------------------------------------------------------------- the course map

def course_map(readme: Path = ROOT / "README.md") -> list[dict[str, str]]:
    """The rows of README's course map: number, title, notebook path, goal, lab (markdown)."""
    text = readme.read_text()
    sec = text.split("## Course map", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in sec.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.fullmatch(r"\d+", cells[0]):
            continue
        m = re.fullmatch(r"\[(.+)\]\((notebooks/[^)]+\.ipynb)\)", cells[1])
        if not m:
            raise SystemExit(f"README course map: cannot read the lesson cell {cells[1]!r}")
        rows.append({"n": cells[0], "title": m.group(1), "path": m.group(2), "goal": cells[2], "lab": cells[3]})
    if not rows:
        raise SystemExit("README has no course map table")
    return rows


def page_name(nb_path: str) -> str:
    return Path(nb_path).stem + ".html"


# ---------------------------------------------------------------- notebooks with outputs

def executed_copy(src: Path, executed: Path | None) -> Path | None:
    """An executed copy of `src` in `executed` (the tests name them notebooks__NAME.ipynb)."""
    if executed is None:
        return None
    for name in (f"notebooks__{src.name}", src.name):
        p = executed / name
        if p.is_file():
            return p
    return None


def execute(src: Path, out: Path, timeout: int = 900) -> float:
    """Run `src` once with smoke=True (papermill, cwd = its folder) into `out`; seconds taken."""
    import papermill as pm

    t0 = time.perf_counter()
    pm.execute_notebook(str(src), str(out), parameters={"smoke": True}, kernel_name="python3", cwd=str(src.parent),
                        execution_timeout=timeout, progress_bar=False, request_save_on_cell_execute=False)
    return time.perf_counter() - t0


def measured_on(nb: dict) -> str | None:
    """The 'Measured on: …' line a lesson's first cell prints (perflab.course.notebook.start)."""
    for cell in nb.get("cells", []):
        for o in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            text = o.get("text") or "".join((o.get("data") or {}).get("text/plain", ""))
            m = MEASURED.search("".join(text) if isinstance(text, list) else str(text))
            if m:
                return m.group(1).strip()
    return None


def has_outputs(nb: dict) -> bool:
    return any(c.get("outputs") for c in nb.get("cells", []) if c.get("cell_type") == "code")


def device_note(nb: dict) -> str:
    """The banner every page starts with: which device produced its figures."""
    line = measured_on(nb)
    if line:
        return (f"**Figures on this page were measured on: {line}.** Curves and tables marked *published* or "
                "*reference* are recorded data, shown with their source (the GPU each was measured on), not "
                "measurements of that machine.")
    if has_outputs(nb):
        return "**Figures on this page:** the device that produced them was not recorded."
    return ("**This page shows the lesson as written, without outputs:** run it (`make lab`) to see every figure "
            "measured on your own device.")


def rewrite_links(source: str, pages: dict[str, str]) -> str:
    """Markdown links to other lessons → their pages; to files not on the site → the file's path.
    `pages` maps a lesson's path in the repository (notebooks/NN_x.ipynb) to its page."""
    def fix(m):
        text, target = m.group(1), m.group(2)
        if re.match(r"[a-z]+:|#", target):
            return m.group(0)
        path, _, anchor = target.partition("#")
        try:  # the file's path in the repository (lessons link relative to notebooks/)
            rel = (NOTEBOOKS / unquote(path)).resolve().relative_to(ROOT).as_posix()
        except ValueError:
            rel = path
        if rel in pages:
            return f"[{text}]({pages[rel]}{'#' + anchor if anchor else ''})"
        return f"{text} (`{rel}` in the course repository)"

    return re.sub(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)", fix, source)


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
MODEL_REF = re.compile(r"IPY_MODEL_(\w+)")


def widget_outputs(models: dict, model_id: str, seen: set | None = None) -> list[dict]:
    """What a widget shows, as plain outputs, in its children's order: the figures and tables its
    Output widgets hold and the text of its HTML widgets (sliders and progress bars are left out)."""
    seen = set() if seen is None else seen
    if model_id in seen or model_id not in models:
        return []
    seen.add(model_id)
    m = models[model_id]
    st = m.get("state", {})
    name = m.get("model_name")
    if name == "OutputModel":
        return list(st.get("outputs", []))
    if name in ("HTMLModel", "HTMLMathModel") and st.get("value"):
        return [{"output_type": "display_data", "metadata": {}, "data": {"text/html": st["value"]}}]
    out = []
    for child in MODEL_REF.findall(json.dumps(st.get("children", []))):
        out += widget_outputs(models, child, seen)
    return out


def flatten_widgets(nb: dict) -> int:
    """Replace every widget view by what it showed when the notebook ran, and drop the widget
    state: the page needs no widget JavaScript (from a CDN) to show the figures. Returns how many."""
    models = nb.get("metadata", {}).get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    n = 0
    for c in nb["cells"]:
        if c["cell_type"] != "code":
            continue
        new = []
        for o in c.get("outputs", []):
            view = (o.get("data") or {}).get(WIDGET_VIEW)
            if view is None:
                new.append(o)
                continue
            n += 1
            shown = widget_outputs(models, view.get("model_id", ""))
            if shown:
                new.append({"output_type": "display_data", "metadata": {}, "data": {
                    "text/html": "<p><em>Interactive in JupyterLab; below, what it showed after the run.</em></p>"}})
                new += shown
        c["outputs"] = new
    nb.get("metadata", {}).pop("widgets", None)
    return n


DISPLAY_MATH = re.compile(r"\$\$(.+?)\$\$", re.S)


def math_to_mathml(source: str) -> str:
    """Display math ($$…$$) → MathML, which browsers draw themselves: no MathJax to fetch."""
    from latex2mathml.converter import convert

    def one(m):
        try:
            return convert(m.group(1).strip(), display="block")
        except Exception:  # a formula the converter cannot read stays as TeX, still readable
            return m.group(0)

    return DISPLAY_MATH.sub(one, source)


def prepare(nb: dict, pages: dict[str, str]) -> dict:
    """The notebook as the site shows it: the device banner first, links rewritten, math as MathML,
    widgets flattened."""
    nb = json.loads(json.dumps(nb))
    flatten_widgets(nb)
    for c in nb["cells"]:
        if c["cell_type"] == "markdown":
            src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            # headings without code spans: mkdocs-jupyter's table of contents drops a heading's
            # `code` from its anchor while the page keeps it, so the contents' links would miss
            src = re.sub(r"(?m)^(#{1,6} .*)$", lambda m: m.group(1).replace("`", ""), src)
            c["source"] = math_to_mathml(rewrite_links(src, pages))
    banner = {"cell_type": "markdown", "metadata": {}, "source": "> " + device_note(nb)}
    first_md = next((i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"), -1)
    nb["cells"].insert(first_md + 1, banner)  # after the title
    return nb


# ---------------------------------------------------------------- the site

def index_page(rows: list[dict[str, str]], built: dict[str, dict], readme: Path = ROOT / "README.md") -> str:
    intro = readme.read_text().split("\n## ", 1)[0]
    intro = re.sub(r"^# .*\n", "", intro).strip()
    out = ["# perflab — make neural-network training fast, measured on your own machine", "", intro, "",
           "## Course map", "",
           "Each lesson: **predict → measure → explain the gap**. Each page says which device produced its figures.",
           "", "| # | lesson | you leave able to… | lab | figures from |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        b = built.get(r["n"])
        lab = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"\1 (`\2`)", r["lab"])
        if b:
            parts = b["device"].split(" · ")  # 'name [dev] · torch … · date · mode' → name and mode
            short = f"{parts[0]} · {parts[-1]}" if len(parts) > 2 else b["device"]
            out.append(f"| {r['n']} | [{r['title']}]({Path(r['path']).name}) | {r['goal']} | {lab} | {short} |")
        else:
            out.append(f"| {r['n']} | {r['title']} (not on this build) | {r['goal']} | {lab} | – |")
    out += ["", "Labs (graded exercises) are in the course repository under `labs/`; run them in JupyterLab."]
    return "\n".join(out) + "\n"


def mkdocs_yml(rows, built) -> str:
    nav = ["  - Course map: index.md"] + [f"  - \"{r['n']} · {r['title']}\": {Path(r['path']).name}"
                                          for r in rows if r["n"] in built]
    return "\n".join([
        "site_name: perflab",
        "site_description: Make neural-network training fast, measured on your own machine",
        "docs_dir: docs",
        "site_dir: site",
        "use_directory_urls: false   # pages open from file:// too",
        "theme:",
        "  name: material",
        "  font: false               # no web fonts: the site is read offline",
        "  features: [navigation.footer]",
        "plugins:",
        "  - search",
        "  - mkdocs-jupyter:",
        "      execute: false",
        "      include_source: false",
        "      include_requirejs: false",
        "      ignore_h1_titles: false",
        "markdown_extensions: [tables]",
        "nav:",
        *nav,
        "",
    ])


def build(out: Path, lessons: list[str] | None = None, executed: Path | None = None, run: bool = True,
          work: Path | None = None) -> dict:
    """Build the site into `out`; returns {'lessons': {n: {...}}, 'site': path, 'seconds': ...}."""
    t0 = time.perf_counter()
    out = Path(out).resolve()  # mkdocs runs inside the work folder: a relative path would not resolve there
    rows = course_map()
    if lessons:
        want = {f"{int(x):02d}" for x in lessons}
        unknown = want - {r["n"] for r in rows}
        if unknown:
            raise SystemExit(f"no lesson {', '.join(sorted(unknown))} in README's course map")
        rows_built = [r for r in rows if r["n"] in want]
    else:
        rows_built = rows
    work = Path(work).resolve() if work else out.parent / (out.name + ".build")
    if work.exists():
        shutil.rmtree(work)
    docs = work / "docs"
    docs.mkdir(parents=True)
    exec_dir = work / "executed"
    exec_dir.mkdir()
    pages = {r["path"]: page_name(r["path"]) for r in rows_built}
    built = {}
    for r in rows_built:
        src = ROOT / r["path"]
        if not src.is_file():
            raise SystemExit(f"README's course map names {r['path']}, which does not exist")
        have = executed_copy(src, executed)
        how = "reused"
        if have is None and run:
            have = exec_dir / src.name
            print(f"[site] executing {src.name} (smoke mode) …", flush=True)
            secs = execute(src, have)
            how = f"executed here in {secs:.0f} s"
        nb = json.loads((have or src).read_text())
        if have is None:
            how = "not executed"
        page = prepare(nb, pages)
        (docs / src.name).write_text(json.dumps(page, indent=1))
        built[r["n"]] = {"device": measured_on(nb) or ("not executed" if not has_outputs(nb) else "not recorded"),
                         "how": how, "page": page_name(r["path"])}
        print(f"[site] {r['n']} {r['title']}: {how}; figures from {built[r['n']]['device']}", flush=True)
    (docs / "index.md").write_text(index_page(rows, built))
    (work / "mkdocs.yml").write_text(mkdocs_yml(rows, built))
    mk = [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "-f", str(work / "mkdocs.yml")]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    r = subprocess.run(mk, cwd=work, capture_output=True, text=True, env=env)
    log = r.stdout + r.stderr
    if r.returncode:
        raise SystemExit(f"mkdocs build failed:\n{log[-4000:]}")
    if out.exists():
        shutil.rmtree(out)
    shutil.move(str(work / "site"), str(out))
    shutil.rmtree(work)  # executed copies and mkdocs sources; kept only when the build fails
    return {"lessons": built, "site": str(out), "seconds": time.perf_counter() - t0, "log": log}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "_site"), help="where the site goes (default _site/)")
    ap.add_argument("--lessons", nargs="+", metavar="NN", help="only these lessons (default: every lesson)")
    ap.add_argument("--executed", help="a folder of executed copies to reuse (the tests' $PERFLAB_EXECUTED)")
    ap.add_argument("--no-execute", action="store_true", help="lessons without outputs (nothing is run)")
    args = ap.parse_args(argv)
    res = build(Path(args.out), args.lessons, Path(args.executed) if args.executed else None, run=not args.no_execute)
    print(f"[site] {len(res['lessons'])} lessons → {res['site']}/index.html ({res['seconds']:.0f} s); "
          "open it in a browser, no network needed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
