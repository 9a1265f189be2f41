"""`make site` (tools/site.py): the course as a static site. Built here for two lessons, then every
internal link and image of every page must resolve, nothing may be fetched from the network, and
each lesson page must say which device produced its figures.

The pages are built from executed lessons, so their figures are there to check: the copies the
notebook tests left (tests/conftest.py's executed_dir; under xdist this test runs after them, in
the lessons' group), or, run alone, the two lessons executed here in smoke mode (about 15 s).
The widget flattening that puts the figures on the pages is also tested on a small notebook of its own.
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("site_builder", ROOT / "tools" / "site.py")
site = importlib.util.module_from_spec(spec)
spec.loader.exec_module(site)
LESSONS = ["00", "01"]

pytest.importorskip("mkdocs_jupyter", reason="mkdocs-jupyter is not installed (pip install -e .)")


pytestmark = pytest.mark.notebooks  # it executes lessons when no executed copies are at hand


@pytest.fixture(scope="module")
def built(tmp_path_factory, executed_dir):
    out = tmp_path_factory.mktemp("site") / "site"
    res = site.build(out, LESSONS, executed_dir, run=True)
    return out, res


ATTR = re.compile(r"""\b(href|src)\s*=\s*(["'])(.*?)\2""", re.S)
IDS = re.compile(r"""\bid\s*=\s*(["'])(.*?)\1""")


def _local_targets(page: Path):
    for attr, _q, raw in ATTR.findall(page.read_text(encoding="utf-8")):
        url = html.unescape(raw).strip()
        if not url or url.startswith(("data:", "mailto:", "javascript:")):
            continue
        yield attr, url


def test_every_internal_link_and_image_resolves_and_nothing_is_fetched(built):
    out, _res = built
    # 404.html is for a web server (root-relative links); the site is read from its folder
    pages = sorted(p for p in out.rglob("*.html") if p.name != "404.html")
    assert {p.name for p in pages} >= {"index.html", "00_setup_and_your_machine.html", "01_flops.html"}
    ids = {p: set(m[1] for m in IDS.findall(p.read_text(encoding="utf-8"))) for p in pages}
    broken, remote = [], []
    checked = 0
    for page in pages:
        for attr, url in _local_targets(page):
            u = urlparse(url)
            if u.scheme in ("http", "https"):
                # a plain link out is fine to follow by hand; a page must not *load* anything remote
                if attr == "src" or re.search(rf"<link[^>]+href=[\"']{re.escape(url)}", page.read_text()):
                    remote.append(f"{page.name}: {url}")
                continue
            target = (page.parent / unquote(u.path)).resolve() if u.path else page
            checked += 1
            if not target.exists():
                broken.append(f"{page.relative_to(out)}: {attr}={url}")
            elif u.fragment and target.suffix == ".html" and target in ids and u.fragment not in ids[target]:
                broken.append(f"{page.relative_to(out)}: {url} (no such anchor)")
    assert checked > 50  # the pages really were read
    # the lessons' figures are on their pages, embedded (data: URIs: nothing to fetch or lose)
    figures = sum(len(re.findall(r"<img[^>]+src=[\"']data:image/", p.read_text(encoding="utf-8"))) for p in pages)
    assert figures >= 3, figures
    assert not broken, "\n".join(broken[:20])
    assert not remote, "pages load from the network:\n" + "\n".join(remote[:20])


def test_index_mirrors_the_course_map_and_pages_name_their_device(built):
    out, res = built
    rows = site.course_map()
    assert [r["n"] for r in rows][:2] == ["00", "01"] and len(rows) >= 9
    index = (out / "index.html").read_text(encoding="utf-8")
    for r in rows:  # every lesson of README's map is listed; the built ones link to their page
        assert html.escape(r["title"]).split("&")[0] in index, r["title"]
    assert 'href="00_setup_and_your_machine.html"' in index and 'href="01_flops.html"' in index
    assert index.count("not on this build") == len(rows) - len(LESSONS)
    for n in LESSONS:
        info = res["lessons"][n]
        page = (out / info["page"]).read_text(encoding="utf-8")
        assert info["how"] == "reused" or info["how"].startswith("executed here"), info  # never built bare here
        assert "Figures on this page were measured on:" in page and ("[cpu]" in page or "[cuda" in page)
        assert "data:image/png;base64," in page  # the figures are on the page
    # a link from lesson 01 to its lab (not on the site) became the lab's path in the repository
    l01 = (out / "01_flops.html").read_text(encoding="utf-8")
    assert "labs/01_flops.ipynb" in l01 and 'href="../labs/01_flops.ipynb"' not in l01


def test_links_between_lessons_are_rewritten_to_pages():
    pages = {"notebooks/04_tiles_and_waves.ipynb": "04_tiles_and_waves.html"}
    src = ("See [lesson 04](04_tiles_and_waves.ipynb#waves), [the lab](../labs/04_cliffs.ipynb), [web](https://x.org) "
           "![img](a.png) [same name, a lab](../labs/04_tiles_and_waves.ipynb)")
    out = site.rewrite_links(src, pages)
    assert "[lesson 04](04_tiles_and_waves.html#waves)" in out
    assert "the lab (`labs/04_cliffs.ipynb` in the course repository)" in out
    assert "[web](https://x.org)" in out and "![img](a.png)" in out
    assert "same name, a lab (`labs/04_tiles_and_waves.ipynb` in the course repository)" in out


def test_a_widgets_figure_is_put_on_the_page_without_widget_javascript():
    fig = {"output_type": "display_data", "metadata": {}, "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}}
    state = {
        "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_title", "IPY_MODEL_slider", "IPY_MODEL_out"]}},
        "title": {"model_name": "HTMLModel", "state": {"value": "<b>Roofline</b>"}},
        "slider": {"model_name": "IntSliderModel", "state": {"value": 3}},
        "out": {"model_name": "OutputModel", "state": {"outputs": [fig]}},
    }
    nb = {"metadata": {"widgets": {site.WIDGET_STATE: {"state": state}}}, "cells": [
        {"cell_type": "code", "source": "panel", "metadata": {}, "outputs": [
            {"output_type": "display_data", "metadata": {},
             "data": {site.WIDGET_VIEW: {"model_id": "box"}, "text/plain": "VBox(...)"}}]}]}
    assert site.flatten_widgets(nb) == 1
    outs = nb["cells"][0]["outputs"]
    assert [o["data"].get("text/html", "") for o in outs][1] == "<b>Roofline</b>"
    assert outs[-1] is fig or outs[-1] == fig
    assert "widgets" not in nb["metadata"]
    assert not any(site.WIDGET_VIEW in o["data"] for o in outs)
    assert json.dumps(nb)  # still a notebook


def test_display_math_becomes_mathml_that_needs_no_script():
    out = site.math_to_mathml("Waves:\n\n$$\\text{waves} = \\lceil \\text{tiles} / \\text{SMs} \\rceil$$\n\nand `$PATH`")
    assert out.count("<math") == 1 and 'display="block"' in out and "<mtext>waves</mtext>" in out
    assert "&#x02308;" in out  # ⌈
    assert "$$" not in out and "`$PATH`" in out  # a lone $ in code is left alone
