"""The portable markup of CONTRIBUTING.md on the website (Jupyter Book 1.x, -n -W).

A small book with the course's own _config.yml, extensions and bibliography renders the
sample notebook of markup.py: the build must be warning-free (so every citation link
resolves to an anchor named after its BibTeX key), a link to a key that is not in
references.bib must fail the build, math inside <details> must become math, and in
headless Chromium the details must open onto rendered MathJax.
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from markup import sample_notebook

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIB_KEYS = re.findall(r"^@\w+\{([^,]+),", (ROOT / "references.bib").read_text(), re.M)


EXPLORER_CELL = """import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import attnlib as al

def render(k):
    fig, ax = plt.subplots(figsize=(3, 2))
    al.plots.bars(ax, [k, 1.0, 0.5], ["a", "b", "c"], title=f"k = {k}")
    return fig

al.widgets.explorer(render, [1, 2, 3], description="k")"""


def _make_book(dest: pathlib.Path, notebook) -> None:
    dest.mkdir(parents=True)
    config = (ROOT / "_config.yml").read_text()
    # the markup sample is not executed; the explorer page is, like a chapter (its widget
    # state is embedded in the page)
    config = config.replace("execute:\n", "execute:\n  exclude_patterns: [chapters/sample.ipynb]\n", 1)
    (dest / "_config.yml").write_text(config)
    (dest / "_toc.yml").write_text("format: jb-book\nroot: index\nchapters:\n"
                                   "  - file: chapters/sample\n  - file: chapters/explorer\n  - file: appendix/bibliography\n")
    (dest / "index.md").write_text("# Sample book\n")
    shutil.copy(ROOT / "references.bib", dest)
    for sub in ("appendix", "chapters"):
        (dest / sub).mkdir()
    shutil.copy(ROOT / "appendix" / "bibliography.md", dest / "appendix")
    shutil.copytree(ROOT / "tools" / "sphinxext", dest / "tools" / "sphinxext")
    (dest / "site_assets").symlink_to(ROOT / "site_assets")
    nbformat.write(notebook, dest / "chapters" / "sample.ipynb")
    explorer = nbformat.v4.new_notebook(metadata=notebook.metadata)
    explorer.cells = [nbformat.v4.new_markdown_cell("# Explorer"), nbformat.v4.new_code_cell(EXPLORER_CELL)]
    nbformat.write(explorer, dest / "chapters" / "explorer.ipynb")


def _build(book: pathlib.Path) -> subprocess.CompletedProcess:
    jb = pathlib.Path(sys.executable).with_name("jupyter-book")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([str(jb), "build", str(book), "-W", "-n", "--keep-going"], cwd=book,
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    book = tmp_path_factory.mktemp("site") / "book"
    _make_book(book, sample_notebook())
    res = _build(book)
    assert res.returncode == 0, f"the sample book does not build with -n -W:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return book / "_build" / "html"


def test_every_bibliography_entry_has_its_key_as_anchor(site):
    html = (site / "appendix" / "bibliography.html").read_text()
    missing = [k for k in BIB_KEYS if f'id="{k}"' not in html]
    assert not missing, (f"bibliography entries without an anchor named after their key: {missing}; "
                         "check bibtex_cite_id in _config.yml and that the keys are lower-case ids")


def test_citation_links_resolve_to_the_entries(site):
    page = (site / "chapters" / "sample.html").read_text()
    for key in ("vaswani2017attention", "dao2022flashattention"):
        assert re.search(rf'href="\.\./appendix/bibliography\.html#{key}"', page), \
            f"the link to {key} does not point at its bibliography entry"


def test_a_link_to_an_unknown_key_fails_the_build(tmp_path):
    nb = sample_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell("[Nobody, 2099](../appendix/bibliography.md#nobody2099)"))
    nb.cells[-1].pop("id", None)
    _make_book(tmp_path / "book", nb)
    res = _build(tmp_path / "book")
    assert res.returncode != 0 and "nobody2099" in res.stdout + res.stderr, \
        "a citation link to a key missing from references.bib did not fail the -W build"


def test_math_inside_details_is_math_on_the_site(site):
    page = (site / "chapters" / "sample.html").read_text()
    m = re.search(r"<details>(.*?)</details>", page, re.S)
    assert m, "the <details> block is missing from the page"
    inside = m.group(1)
    assert "<summary>Answer</summary>" in inside
    assert 'class="math' in inside, f"the math inside <details> was not parsed as math:\n{inside[:600]}"
    assert "$W_Q" not in inside and "$$" not in inside, "raw $...$ left inside <details>"


def test_details_open_onto_rendered_mathjax_in_chromium(site):
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("ATTNLIB_CHROMIUM", "/usr/bin/chromium")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
        page.goto((site / "chapters" / "sample.html").as_uri())
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=60000)
        page.evaluate("() => MathJax.startup.promise")
        page.locator("details summary").first.click()
        state = page.evaluate("""() => {
            const d = document.querySelector('details');
            return {open: d.open, math: d.querySelectorAll('mjx-container').length,
                    errors: d.querySelectorAll('mjx-merror').length, visible: d.querySelector('mjx-container')?.getBoundingClientRect().height || 0,
                    table: document.querySelectorAll('table mjx-container').length};
        }""")
        browser.close()
    assert state["open"], "clicking the summary did not open the <details>"
    assert state["math"] >= 2 and not state["errors"], f"math in the opened <details> is not rendered: {state}"
    assert state["visible"] > 0, "the math in the opened <details> has no height"
    assert state["table"] >= 2, f"math in the table is not rendered: {state}"


def test_explorer_is_live_on_the_site_and_its_still_hidden(site):
    """The built page embeds the widget state: the live control shows and moves the image;
    the still (for front ends without the widget) is hidden. With the widget manager
    blocked the still shows instead."""
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("ATTNLIB_CHROMIUM", "/usr/bin/chromium")
    page_file = (site / "chapters" / "explorer.html").as_uri()
    state_js = """() => {
        const vis = e => e.offsetParent !== null && e.getBoundingClientRect().height > 0;
        const still = document.querySelector('.attnlib-explorer-still');
        const live = document.querySelector('.attnlib-explorer');
        return {still: !!still && vis(still), live: !!live && vis(live),
                errors: (document.body.innerText.match(/Error displaying widget/g) || []).length};
    }"""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
        page.goto(page_file)
        page.wait_for_selector(".attnlib-explorer", timeout=60000)
        live = page.evaluate(state_js)
        img = "() => Array.from(document.querySelectorAll('.attnlib-explorer img')).find(i => i.offsetParent !== null).src"
        before = page.evaluate(img)
        page.locator(".attnlib-explorer .noUi-handle").first.focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"(b) => ({img})() !== b", arg=before, timeout=15000)

        blocked = browser.new_page()  # no widget manager: the page must still show the still
        blocked.route("**/*", lambda r: r.abort() if "html-manager" in r.request.url or not
                      r.request.url.startswith("file:") else r.continue_())
        blocked.goto(page_file)
        blocked.wait_for_load_state("load")
        without = blocked.evaluate(state_js)
        browser.close()
    assert live == {"still": False, "live": True, "errors": 0}, f"with the embedded state: {live}"
    assert without["still"] and not without["live"], f"without the widget manager: {without}"
