"""Checks of the book's sources and of the built site in _build/html (no browser).

Run after the book is built (``make browser`` runs them with the browser tests; ``make
unit`` leaves them out). Without a built site the site checks are skipped, or fail under
``ATTNLIB_REQUIRE_SITE=1`` (as in ``make test``).
"""
from __future__ import annotations

import html.parser
import importlib
import json
import os
import pathlib
import pkgutil
import re
import sys
import urllib.parse

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
SITE = pathlib.Path(os.environ.get("ATTNLIB_SITE", ROOT / "_build" / "html"))
SKIP_DIRS = {"_static", "_sources", "_images", "reports", "_sphinx_design_static"}


# ------------------------------------------------------------------------------ sources

def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    return files


def _source(stem: str) -> pathlib.Path | None:
    for ext in (".ipynb", ".md"):
        if (ROOT / f"{stem}{ext}").is_file():
            return ROOT / f"{stem}{ext}"
    return None


def test_every_toc_entry_has_a_source_file():
    missing = [f for f in toc_files() if _source(f) is None]
    assert not missing, f"_toc.yml names files that do not exist: {missing}"


def test_appendices_come_after_the_chapters():
    files = toc_files()
    chapters = [f for f in files if f.startswith("chapters/")]
    appendix = [f for f in files if f.startswith("appendix/")]
    assert chapters == sorted(f"chapters/{p.stem}" for p in (ROOT / "chapters").glob("*.ipynb")), chapters
    assert appendix == ["appendix/misconceptions", "appendix/glossary", "appendix/api", "appendix/bibliography",
                        "appendix/where_next", "appendix/teaching"]
    assert files.index(appendix[0]) > files.index(chapters[-1])


def test_no_book_folder_named__static():
    # Jupyter Book adds every .js/.css under a _static/ folder to *every* page, and then
    # does the same for every other html_static_path (our vendored libraries).
    assert not (ROOT / "_static").exists(), "keep site files in site_assets/, not _static/"


def _bib_keys() -> set[str]:
    return set(re.findall(r"@\w+\s*\{\s*([^,\s]+)\s*,", (ROOT / "references.bib").read_text(encoding="utf-8")))


def test_bibliography_has_the_papers_the_course_builds_on():
    required = {"vaswani2017attention", "dao2022flashattention", "dao2024flashattention2",
                "shah2024flashattention3", "milakov2018online", "rabe2021selfattention",
                "beltagy2020longformer", "zaheer2020bigbird", "katharopoulos2020transformers",
                "liu2023ring", "ba2016layer", "xiong2020layer"}
    assert not required - _bib_keys(), f"missing from references.bib: {sorted(required - _bib_keys())}"


def test_bibtex_keys_are_unique():
    keys = re.findall(r"@\w+\s*\{\s*([^,\s]+)\s*,", (ROOT / "references.bib").read_text(encoding="utf-8"))
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    assert not dupes, f"references.bib defines these keys twice: {dupes}"


def _cited_keys() -> dict[str, set[str]]:
    cites: dict[str, set[str]] = {}
    # {cite}`key` (MyST pages) and [Author, year](../appendix/bibliography.md#key) (chapters)
    pattern = re.compile(r"\{cite(?::\w+)?\}`([^`]+)`|bibliography\.md#([\w-]+)")
    for f in toc_files():
        src = _source(f)
        if src is None:
            continue
        text = src.read_text(encoding="utf-8")
        if src.suffix == ".ipynb":
            nb = json.loads(text)
            text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
        for groups in pattern.findall(text):
            cites.setdefault(f, set()).update(k.strip() for k in "".join(groups).split(","))
    return cites


def test_every_citation_is_in_references_bib():
    keys = _bib_keys()
    missing = {f: sorted(c - keys) for f, c in _cited_keys().items() if c - keys}
    assert not missing, f"cited but not in references.bib (append the entries): {missing}"


# "seed" for the source articles (issue 31): "the seed article", "the seeds write", "the seed's word"
_SEED_AS_ARTICLE = re.compile(r"\bseed[ -]articles?\b|\bthe seeds?(?:'s?|')? (?:writes?|draws?|calls?|quotes?|says?|"
                              r"words?|shape table|article|text|\$)", re.I)


def test_seed_means_a_random_seed_and_the_source_articles_are_defined_on_the_first_page():
    index = (ROOT / "index.md").read_text(encoding="utf-8")
    assert re.search(r"^## The source articles$", index, re.M) and "**the source articles**" in index, (
        "index.md must say, under '## The source articles', what the source articles are")
    found = []
    for path in [ROOT / "index.md", *ROOT.glob("appendix/*.md"), *ROOT.glob("chapters/*.ipynb"), *ROOT.glob("solutions/*.ipynb")]:
        texts = ([path.read_text(encoding="utf-8")] if path.suffix == ".md" else
                 ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]])
        found += [f"{path.relative_to(ROOT)}: {m.group(0)!r}" for t in texts for m in _SEED_AS_ARTICLE.finditer(t)]
    assert not found, ("'seed' means a random seed only; call them the source articles (index.md defines them):\n"
                       + "\n".join(found))


def test_every_exercise_is_checked_in_its_chapter():
    # the misconceptions appendix links each exercise to the section of its check cell
    exercises = importlib.import_module("attnlib.exercises").EXERCISES
    missing = []
    for ex in exercises.values():
        nb = ROOT / "chapters" / f"{ex.chapter}.ipynb"
        code = "" if not nb.is_file() else "\n".join(
            "".join(c["source"]) for c in json.loads(nb.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "code")
        if f'check("{ex.name}"' not in code and f"check('{ex.name}'" not in code:
            missing.append(f"{ex.name} (chapter {ex.chapter})")
    assert not missing, f"exercises registered but never checked in their chapter: {missing}"



_SECTION_LINK = re.compile(r"\{section\}`[^`<]*<([^>#`]+)#([^>`]+)>`")


def _heading_ids(stem: str) -> set[str]:
    """The HTML ids Sphinx gives the headings of a chapter or appendix page: docutils'
    ``make_id`` of the heading text, with MyST's inline math and code read as their text."""
    from docutils.nodes import make_id

    path = _source(stem)
    if path.suffix == ".ipynb":
        text = "\n".join("".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
                         if c["cell_type"] == "markdown")
    else:
        text = path.read_text(encoding="utf-8")
    ids = {m.group(1) for m in re.finditer(r"^\(([\w-]+)\)=\s*$", text, re.M)}  # explicit targets
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*$", text, re.M):
        ids.add(make_id(re.sub(r"[$`*]", "", m.group(1))))
    return ids


def test_section_links_name_a_heading_that_exists():
    # the site build reports these too, but only after minutes of building; a renamed
    # heading should fail `make check`. The Chinese catalogues carry the same links.
    sources = [p for p in [*ROOT.glob("appendix/*.md"), *ROOT.glob("chapters/*.ipynb"), ROOT / "index.md"]]
    sources += sorted((ROOT / "locales").rglob("*.po"))
    broken = []
    for path in sources:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".po":  # a msgid/msgstr wraps over quoted lines: join them first
            text = re.sub(r'"\n"', "", text)
        for doc, anchor in _SECTION_LINK.findall(text):
            stem = doc.strip().lstrip("/")
            if _source(stem) is None:
                broken.append(f"{path.relative_to(ROOT)}: no page {stem}")
            elif anchor not in _heading_ids(stem):
                broken.append(f"{path.relative_to(ROOT)}: {stem} has no heading with id {anchor!r}")
    assert not broken, "{section} links to headings that do not exist (rename the anchor):\n" + "\n".join(broken)

def test_launch_buttons_and_repository_are_configured():
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cfg["repository"]["url"].startswith("https://github.com/")
    buttons = cfg["launch_buttons"]
    for key in ("binderhub_url", "colab_url", "jupyterhub_url"):
        assert buttons.get(key, "").startswith("https://"), key
    assert not buttons.get("thebe"), "thebe loads its JavaScript from a CDN on every page"


# -------------------------------------------------------------------------- built site

class _Page(html.parser.HTMLParser):
    """The ids, links and resources of one HTML page."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.resources: list[tuple[str, str]] = []  # (tag, url)
        self.classes: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if a.get("name") and tag == "a":
            self.ids.add(a["name"])
        self.classes.update((a.get("class") or "").split())
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag in ("script", "img", "iframe", "source", "video", "audio", "embed") and a.get("src"):
            self.resources.append((tag, a["src"]))
        if tag == "link" and a.get("href") and set((a.get("rel") or "").split()) & {"stylesheet", "preload", "icon", "modulepreload"}:
            self.resources.append((tag, a["href"]))


@pytest.fixture(scope="module")
def pages() -> dict[str, _Page]:
    if not (SITE / "index.html").is_file():
        msg = f"no built site at {SITE}: run `make book` first"
        if os.environ.get("ATTNLIB_REQUIRE_SITE") == "1":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    out = {}
    for f in sorted(SITE.rglob("*.html")):
        rel = f.relative_to(SITE)
        # 404.html links absolutely to the published path (/REPO/...); it is checked served
        # under that path in tests/browser/test_publishing_site.py
        if SKIP_DIRS & set(rel.parts) or rel.as_posix() == "404.html":
            continue
        p = _Page()
        p.feed(f.read_text(encoding="utf-8", errors="replace"))
        out[rel.as_posix()] = p
    return out


def _is_external(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    return bool(parts.scheme and parts.scheme not in ("data", "blob")) or url.startswith("//")


def test_every_toc_page_is_built(pages):
    missing = [f for f in toc_files() if f"{f}.html" not in pages]
    assert not missing, f"pages in _toc.yml that were not built: {missing}"


def test_internal_links_resolve(pages):
    broken = []
    for name, page in pages.items():
        for href in page.links:
            if _is_external(href) or href.startswith(("mailto:", "javascript:")):
                continue
            parts = urllib.parse.urlsplit(href)
            target = (SITE / name).parent / urllib.parse.unquote(parts.path) if parts.path else SITE / name
            target = pathlib.Path(os.path.normpath(target))
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{name}: {href} (no such file)")
                continue
            if parts.fragment and target.suffix == ".html":
                rel = target.relative_to(SITE).as_posix()
                ids = pages[rel].ids if rel in pages else None
                if ids is not None and urllib.parse.unquote(parts.fragment) not in ids:
                    broken.append(f"{name}: {href} (no anchor #{parts.fragment} in {rel})")
    assert not broken, f"{len(broken)} broken internal links:\n" + "\n".join(broken[:40])


def test_pages_load_nothing_from_another_host(pages):
    external = [f"{name}: <{tag}> {url}" for name, page in pages.items()
                for tag, url in page.resources if _is_external(url)]
    assert not external, "resources from other hosts:\n" + "\n".join(external[:40])


def test_every_local_resource_exists(pages):
    missing = []
    for name, page in pages.items():
        for tag, url in page.resources:
            if _is_external(url) or url.startswith(("data:", "blob:")):
                continue
            path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
            if not os.path.exists(os.path.normpath((SITE / name).parent / path)):
                missing.append(f"{name}: <{tag}> {url}")
    assert not missing, "missing files:\n" + "\n".join(missing[:40])


def test_stylesheets_fetch_no_fonts_from_another_host():
    if not SITE.is_dir():
        pytest.skip("no built site")
    bad = []
    for css in SITE.joinpath("_static").rglob("*.css"):
        for url in re.findall(r"url\(\s*['\"]?([^'\")]+)", css.read_text(encoding="utf-8", errors="replace")):
            if _is_external(url):
                bad.append(f"{css.relative_to(SITE)}: {url}")
    assert not bad, "stylesheets that fetch from other hosts:\n" + "\n".join(bad[:20])


def test_math_and_widgets_use_the_vendored_libraries(pages):
    for name, page in pages.items():
        scripts = [url for tag, url in page.resources if tag == "script"]
        if "math" in page.classes:
            assert any("_static/vendor/mathjax/tex-mml-chtml.js" in s for s in scripts), \
                f"{name} has math but does not load the site's MathJax 3"
        html_text = (SITE / name).read_text(encoding="utf-8", errors="replace")
        if "application/vnd.jupyter.widget-state+json" in html_text:
            for lib in ("_static/vendor/requirejs/require.js", "_static/vendor/html-manager/embed-amd.js"):
                assert any(lib in s for s in scripts), f"{name} has widgets but does not load {lib}"


def _published() -> bool:
    import sys
    sys.path.insert(0, str(ROOT / "tools" / "sphinxext"))
    try:
        from attnlib_publish import published
    finally:
        sys.path.pop(0)
    return published(yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"])


def test_no_launch_or_repository_button_before_the_repository_is_set(pages):
    """With _config.yml's placeholder repository (github.com/OWNER/...), no page links to
    Binder, Colab, the JupyterHub or the repository: each would fail (docs/publishing.md)."""
    if _published():
        pytest.skip("the repository is set: test_launch_buttons_are_plain_links checks the buttons")
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    hosts = {urllib.parse.urlsplit(cfg["launch_buttons"][k]).hostname
             for k in ("binderhub_url", "colab_url", "jupyterhub_url") if cfg["launch_buttons"].get(k)}
    chapters = [n for n in pages if n.startswith(("chapters/", ZH + "chapters/"))]
    assert chapters, "no chapter built"
    wrong = [f"{n}: {h}" for n in pages for h in pages[n].links
             if urllib.parse.urlsplit(h).hostname in hosts or "github.com/OWNER" in h]
    assert not wrong, "links that need the repository address:\n" + "\n".join(wrong[:10])


def test_launch_buttons_are_plain_links(pages):
    chapter = next((n for n in pages if n.startswith("chapters/")), None)
    if chapter is None:
        pytest.skip("no chapter built")
    if not _published():
        pytest.skip("the repository is not set yet: no launch button (tested above)")
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = urllib.parse.urlsplit(cfg["repository"]["url"]).path.strip("/")  # OWNER/NAME
    stem = pathlib.PurePosixPath(chapter).stem
    links = pages[chapter].links
    for key in ("binderhub_url", "colab_url", "jupyterhub_url"):
        host = urllib.parse.urlsplit(cfg["launch_buttons"][key]).hostname
        ok = [h for h in links if urllib.parse.urlsplit(h).hostname == host and f"{stem}.ipynb" in h
              and (repo in h or urllib.parse.quote(repo, safe="") in h)]
        assert ok, f"{chapter} has no {key} launch link to {host} for {repo}/{stem}.ipynb"


def test_every_quiz_has_its_answer_in_a_dropdown(pages):
    short = []
    for name in pages:
        text = (SITE / name).read_text(encoding="utf-8", errors="replace")
        quizzes = text.count('class="attnlib-quiz"')
        # a MyST dropdown, or (in chapters) an HTML <details> block with its <summary>
        dropdowns = len(re.findall(r'<details class="[^"]*\bsd-dropdown\b|<details>\s*<summary>', text))
        if quizzes > dropdowns:
            short.append(f"{name}: {quizzes} quizzes, {dropdowns} answer dropdowns")
    assert not short, "concept questions without a hidden answer:\n" + "\n".join(short)


def _public_modules() -> list[str]:
    pkg = importlib.import_module("attnlib")
    names = []
    for info in pkgutil.walk_packages(pkg.__path__, "attnlib."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts) or (parts[:2] == ["attnlib", "exercises"] and len(parts) > 2):
            continue
        names.append(info.name)
    return names


def test_api_reference_covers_every_public_module(pages):
    page = pages.get("appendix/api.html")
    assert page is not None, "appendix/api.html was not built"
    missing = [m for m in _public_modules() if m.replace(".", "-") not in page.ids]
    assert not missing, f"modules without a section in the API reference: {missing}"
    for fn in importlib.import_module("attnlib").__all__:
        obj = getattr(importlib.import_module("attnlib"), fn)
        if callable(obj) and not isinstance(obj, type(importlib)):
            assert f"attnlib.{fn}" in page.ids, f"attnlib.{fn} is not documented in the API reference"


def test_mistake_catalogue_lists_every_known_mistake():
    page = SITE / "appendix" / "misconceptions.html"
    if not page.is_file():
        pytest.skip("no built site")
    text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))
    # Sphinx's smart quotes turn ' into ’ and " into “ ” in the page
    norm = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-",
                          "\u2026": "..."})
    text = " ".join(text.translate(norm).split()).replace("---", "-").replace("--", "-")
    exercises = importlib.import_module("attnlib.exercises").EXERCISES
    missing = [f"{ex.name}: {m.title}" for ex in exercises.values() for m in ex.mistakes
               if " ".join(m.title.rstrip(".").translate(norm).split()).replace("--", "-") not in text]
    assert not missing, f"mistakes missing from the misconceptions appendix: {missing[:10]}"


# ------------------------------------------------------------------ the Chinese edition

ZH = "zh/"
_SWITCH = re.compile(r'<a href="([^"]+)"[^>]*class="[^"]*attnlib-edition-switch[^"]*"')
_CJK = re.compile(r"[\u4e00-\u9fff]")


def _english_pages(pages) -> list[str]:
    return [n for n in pages if not n.startswith(ZH)]


def _edition_link(name: str) -> str | None:
    m = _SWITCH.search((SITE / name).read_text(encoding="utf-8", errors="replace"))
    if not m:
        return None
    target = os.path.normpath((SITE / name).parent / urllib.parse.unquote(m.group(1)))
    return pathlib.Path(target).relative_to(SITE).as_posix()


def test_every_english_page_has_its_chinese_counterpart(pages):
    english = _english_pages(pages)
    assert english and len([n for n in pages if n.startswith(ZH)]) >= len(english), \
        "the Chinese edition is missing: `make book` builds it into _build/html/zh/"
    missing = [n for n in english if ZH + n not in pages]
    assert not missing, f"English pages without a Chinese counterpart: {missing}"


def test_each_page_links_to_its_counterpart_from_the_header(pages):
    wrong = []
    for name in _english_pages(pages):
        for here, there in ((name, ZH + name), (ZH + name, name)):
            if here in pages and _edition_link(here) != there:
                wrong.append(f"{here}: header link goes to {_edition_link(here)!r}, not {there!r}")
    assert not wrong, "\n".join(wrong[:20])


def _article_text(name: str) -> str:
    text = (SITE / name).read_text(encoding="utf-8", errors="replace")
    m = re.search(r'<article class="bd-article"[^>]*>(.*)</article>', text, re.S)
    body = m.group(1) if m else text
    # leave out code, outputs, maths and the API reference's docstrings (kept in English)
    body = re.sub(r'<(pre|script|style|math)\b.*?</\1>', " ", body, flags=re.S)
    body = re.sub(r'<div class="(?:cell_output|highlight)[^"]*".*?</div>', " ", body, flags=re.S)
    body = re.sub(r'<dl class="py [^"]*">.*?</dl>', " ", body, flags=re.S)
    body = re.sub(r"\\\(.*?\\\)|\\\[.*?\\\]|\$\$.*?\$\$", " ", body, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


# pages whose bulk is kept in English by design: the API reference (docstrings, as help()
# shows them) and the bibliography (the papers' own titles); their own prose is Chinese
REFERENCE_PAGES = {"appendix/api", "appendix/bibliography"}


@pytest.mark.parametrize("stem", [f for f in toc_files()])
def test_chinese_pages_are_written_in_chinese(pages, stem):
    name = f"{ZH}{stem}.html"
    if name not in pages:
        pytest.fail(f"{name} was not built")
    text = (SITE / name).read_text(encoding="utf-8", errors="replace")
    assert re.search(r'<html[^>]+lang="zh-CN"', text), f"{name} does not declare lang=zh-CN"
    prose = _article_text(name)
    if stem in REFERENCE_PAGES:  # the title and the first paragraph are the page's own prose
        m = re.search(r"<h1>(.*?)</h1>.*?<p>(.*?)</p>", text, re.S)
        assert m and _CJK.search(m.group(1)) and len(_CJK.findall(m.group(2))) > 20, \
            f"{name}: its title and introduction are not in Chinese"
        return
    cjk = len(_CJK.findall(prose))
    latin = len(re.findall(r"[A-Za-z]", prose))
    # Chinese characters carry about 3x the meaning of a Latin letter; prose left in
    # English shows up as a page dominated by Latin letters
    assert cjk > 0.25 * latin, f"{name}: {cjk} Chinese characters vs {latin} Latin letters in its prose"


def test_chinese_outputs_have_no_english_verdicts_and_no_missing_glyphs(pages):
    english = ["Run this cell to explore", "Not quite.", "Click a choice to see feedback",
               "not attempted", "the course's solution passed", "Question."]
    bad = []
    for name in pages:
        if not name.startswith(ZH + "chapters/"):
            continue
        text = (SITE / name).read_text(encoding="utf-8", errors="replace")
        bad += [f"{name}: {e!r}" for e in english if e in text]
        bad += [f"{name}: matplotlib could not draw a glyph ({m})"
                for m in re.findall(r"Glyph \d+ [^\n<]{0,60}missing from font[^\n<]{0,40}", text)[:2]]
        bad += [f"{name}: {m}" for m in re.findall(r"no 中文 translation of[^\n<]{0,80}", text)[:2]]
    assert not bad, "\n".join(bad[:20])


def test_chinese_mistake_catalogue_lists_every_known_mistake():
    page = SITE / ZH / "appendix" / "misconceptions.html"
    if not page.is_file():
        pytest.skip("no Chinese edition built")
    import attnlib.i18n as i18n
    zh = i18n.catalogue("zh")
    # Sphinx's smart quotes turn ' into ’ in the page
    norm = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"', "\u2026": "..."})
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8"))).split())
    text = text.translate(norm)
    exercises = importlib.import_module("attnlib.exercises").EXERCISES
    missing = [f"{ex.name}: {m.title}" for ex in exercises.values() for m in ex.mistakes
               if " ".join((zh.get(m.title) or "\0").rstrip("。.").translate(norm).split()) not in text]
    assert not missing, f"mistakes missing from the Chinese misconceptions appendix: {missing[:10]}"


def _zh_chapter_pages(pages) -> list[str]:
    return sorted(n for n in pages if n.startswith(ZH + "chapters/"))


def test_chinese_pages_launch_and_download_the_chinese_notebook(pages):
    """Every Chinese chapter's Binder, Colab and JupyterHub buttons open zh/chapters/<stem>.ipynb
    of the repository, and its download button gives that notebook (the English pages'
    buttons give the English one)."""
    chapters = _zh_chapter_pages(pages)
    if not chapters:
        pytest.fail("no Chinese chapter was built (`make book` builds both editions)")
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    hosts = {urllib.parse.urlsplit(cfg["launch_buttons"][k]).hostname: k
             for k in ("binderhub_url", "colab_url", "jupyterhub_url") if cfg["launch_buttons"].get(k)}
    if not _published():
        hosts = {}   # no launch button until the repository is set; the download button is checked
    wrong = []
    for name in chapters:
        stem = pathlib.PurePosixPath(name).stem
        for page, chinese in ((name, True), (name[len(ZH):], False)):
            if page not in pages:
                continue
            for host, key in hosts.items():
                links = [urllib.parse.unquote(h) for h in pages[page].links if urllib.parse.urlsplit(h).hostname == host]
                if not links or not all(f"chapters/{stem}.ipynb" in h and (f"zh/chapters/{stem}.ipynb" in h) == chinese
                                        for h in links):
                    wrong.append(f"{page}: {key} opens {links}, not {'zh/' if chinese else ''}chapters/{stem}.ipynb")
        downloads = [h for h in pages[name].links if h.endswith(f"_sources/chapters/{stem}.ipynb")]
        if not downloads:
            wrong.append(f"{name}: no download link to its notebook")
            continue
        served = (SITE / name).parent / downloads[0]
        if not served.is_file() or served.read_bytes() != (ROOT / "zh" / "chapters" / f"{stem}.ipynb").read_bytes():
            wrong.append(f"{name}: the download button gives {served.relative_to(SITE)}, not zh/chapters/{stem}.ipynb")
    assert not wrong, "\n".join(wrong[:20])


class _OutputsAndComments(html.parser.HTMLParser):
    """Per code cell of a page: the text of its input, its output lines and its comments."""

    VOID = {"br", "img", "input", "meta", "link", "hr", "source", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.cells: list[dict] = []
        self._stack: list[set] = []   # the classes of each open element
        self._skip = 0

    def _inside(self, cls: str) -> bool:
        return any(cls in c for c in self._stack)

    def handle_starttag(self, tag, attrs):
        classes = set((dict(attrs).get("class") or "").split())
        if "cell" in classes and tag == "div":
            self.cells.append({"input": "", "outputs": [""], "comments": []})
        if tag in ("script", "style"):
            self._skip += 1
        if self.cells and self._inside("cell_output") and tag in ("br", "p", "div", "li", "tr", "pre", "summary"):
            self.cells[-1]["outputs"].append("")
        if {"c", "c1", "ch", "cm"} & classes and self.cells:
            self.cells[-1]["comments"].append("")
        if tag not in self.VOID:
            self._stack.append({"__code__"} if tag == "code" and not classes else classes)

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self._skip = max(0, self._skip - 1)
        if tag not in self.VOID and self._stack:
            self._stack.pop()
        if self.cells and self._inside("cell_output") and tag in ("p", "div", "li", "tr", "summary"):
            self.cells[-1]["outputs"].append("")

    def handle_data(self, data):
        if self._skip or not self.cells:
            return
        cell = self.cells[-1]
        if self._inside("cell_input"):
            cell["input"] += data
            if any({"c", "c1", "ch", "cm"} & c for c in self._stack) and cell["comments"]:
                cell["comments"][-1] += data
        elif self._inside("cell_output"):
            if self._stack and self._stack[-1] == {"__code__"}:
                data = f"`{data}`"   # code inside an output (a checker message's <code>)
            parts = data.split("\n")
            cell["outputs"][-1] += parts[0]
            cell["outputs"] += parts[1:]


def test_chinese_pages_print_and_comment_in_chinese(pages):
    """No printed line, output or code comment of a Chinese chapter page has English words
    (outside code, identifiers, numbers and tools/zh_notebooks.ALLOWED_WORDS)."""
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    import zh_notebooks

    chapters = _zh_chapter_pages(pages)
    if not chapters:
        pytest.fail("no Chinese chapter was built (`make book` builds both editions)")
    left = []
    for name in chapters:
        nb = json.loads((ROOT / "zh" / "chapters" / (pathlib.PurePosixPath(name).stem + ".ipynb")).read_text())
        known = zh_notebooks._identifiers(nb)
        found = _OutputsAndComments()
        found.feed((SITE / name).read_text(encoding="utf-8", errors="replace"))
        lines = []
        for cell in found.cells:   # a cell that prints attnlib's source shows code, not prose
            lines += [] if "getsource(" in cell["input"] else [("output", line) for line in cell["outputs"]]
            lines += [("comment", c) for c in cell["comments"] if not zh_notebooks._MARKER_COMMENT.match(c.strip())]
        left += [f"{name} {kind}: {line.strip()[:120]}" for kind, line in lines
                 if line.strip() and zh_notebooks.english_words(html.unescape(line.lstrip("# ")), known)]
    assert not left, f"{len(left)} lines with English on the Chinese pages:\n" + "\n".join(left[:40])


class _VisibleText(html.parser.HTMLParser):
    """What a reader sees or hears on a page, outside code and maths: the text of each
    block (paragraph, heading, list item, table cell, button, caption, the page title)
    joined across its inline elements, and the attributes a tooltip or a screen reader
    says (title, aria-label, alt, placeholder, data-bs-title). Left out, as English by
    design: the API reference's generated sections (docstrings, as ``help()`` shows them),
    the bibliography's entries and the citations that link to them (authors, titles), and
    the glossary's terms (``dl.glossary dt``: the English term beside the Chinese one).
    Code (``pre``, ``code``, ``kbd``, a cell's input and output) is collected as
    identifiers: a name the page shows as code may appear in its prose too."""

    VOID = {"br", "img", "input", "meta", "link", "hr", "source", "wbr", "col", "area", "base"}
    BLOCK = {"p", "div", "li", "dt", "dd", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6", "title",
             "button", "summary", "caption", "figcaption", "label", "section", "nav", "header",
             "footer", "aside", "article", "main", "ul", "ol", "dl", "table", "tr", "blockquote", "br"}
    ATTRS = ("title", "aria-label", "alt", "placeholder", "data-bs-title")

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.seen: list[tuple[str, str]] = []   # (where, text)
        self.code: set[str] = set()
        self._stack: list[tuple[str, set, bool]] = []   # (tag, classes, left out)
        self._block = ""

    def _left_out(self) -> bool:
        return any(skip for _, _, skip in self._stack)

    def _in_code(self) -> bool:
        return any(tag in ("pre", "code", "kbd", "math") or {"highlight", "cell_input", "cell_output"} & cls
                   for tag, cls, _ in self._stack)

    def _flush(self) -> None:
        if self._block.strip():
            where = "title" if any(t == "title" for t, _, _ in self._stack) else "text"
            self.seen.append((where, self._block))
        self._block = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = set((a.get("class") or "").split())
        if tag in self.BLOCK:
            self._flush()
        skip = (tag in ("script", "style", "template")
                or (tag == "section" and (a.get("id") or "").startswith(("module-attnlib", "attnlib-")))
                or bool({"citation", "citation-list"} & cls)
                or (tag == "a" and "bibliography.html#" in (a.get("href") or ""))
                or (tag == "dt" and any(t == "dl" and "glossary" in c for t, c, _ in self._stack)))
        if not skip and not self._left_out() and not self._in_code():
            for key in self.ATTRS:
                if a.get(key):
                    self.seen.append((f"{tag}[{key}]", a[key]))
        if tag not in self.VOID:
            self._stack.append((tag, cls, skip))

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        if tag in self.BLOCK:
            self._flush()
        while self._stack:
            if self._stack.pop()[0] == tag:
                break

    def handle_data(self, data):
        if self._left_out():
            return
        if self._in_code():
            self.code.update(re.findall(r"[A-Za-z_][\w.-]*", data))
            if any(tag == "pre" or {"highlight", "cell_input", "cell_output"} & cls for tag, cls, _ in self._stack):
                return   # a code cell or its output: tests/test_book.py checks outputs and comments
        self._block += data

    def close(self):
        super().close()
        self._flush()


def _chinese_page_english(name: str, known: set[str]) -> list[str]:
    """The English words a Chinese page shows outside code, identifiers, numbers, units,
    names and maths (tools/zh_notebooks.english_words, with its ALLOWED_WORDS and NAMES)."""
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    import zh_notebooks

    found = _VisibleText()
    found.feed((SITE / name).read_text(encoding="utf-8", errors="replace"))
    found.close()
    known = known | found.code
    left = []
    for where, text in found.seen:
        text = re.sub(r"\\\(.*?\\\)|\\\[.*?\\\]|\$\$.*?\$\$", " ", text, flags=re.S)   # MathJax's maths
        words = zh_notebooks.english_words(" ".join(text.split()), known)
        if words:
            left.append(f"{name} {where}: {' '.join(text.split())[:100]!r} ({', '.join(words[:6])})")
    return left


@pytest.fixture(scope="module")
def chapter_identifiers() -> set[str]:
    """The names the chapters' code uses (reshape, period, ...) and the exercises'
    parameters (axis, base): a page may mention them in prose (the misconceptions page
    quotes the checker's messages)."""
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    import zh_notebooks

    names: set[str] = set()
    for path in sorted((ROOT / "zh" / "chapters").glob("*.ipynb")):
        names |= zh_notebooks._identifiers(json.loads(path.read_text(encoding="utf-8")))
    for ex in importlib.import_module("attnlib.exercises").EXERCISES.values():
        names |= set(re.findall(r"[A-Za-z_]\w*", ex.signature()))   # softmax(x, axis=-1): axis
    return names


def test_chinese_pages_show_no_english_outside_code_and_names(pages, chapter_identifiers):
    """Every page of the Chinese edition, the theme's words included (sidebar captions,
    header buttons, tooltips, aria labels, footer, search box): no English outside code,
    identifiers, numbers, units and names (tools/zh_notebooks.py: ALLOWED_WORDS, NAMES)."""
    # the general index lists the glossary's English terms and the API's names (English by
    # design, as on those pages), under Sphinx's untranslatable "module" entries
    chinese = sorted(n for n in pages if n.startswith(ZH) and n != ZH + "genindex.html")
    if not chinese:
        pytest.fail("no Chinese page was built (`make book` builds both editions)")
    left = [line for name in chinese for line in _chinese_page_english(name, chapter_identifiers)]
    assert not left, f"{len(left)} places with English on the Chinese pages:\n" + "\n".join(left[:60])


def test_the_english_detector_sees_the_themes_words(tmp_path, monkeypatch, chapter_identifiers):
    """The check above is not blind: on a page with the theme's English words left in
    (what the Chinese edition showed before its theme catalogues), it finds each of them,
    and it passes the same page in Chinese."""
    english = ('<html lang="zh-CN"><head><title>3. 缩放 — 自注意力</title></head><body>'
               '<nav aria-label="Main"><p class="caption">Chapters</p></nav>'
               '<button title="Toggle primary sidebar"></button>'
               '<a class="btn" href="https://github.com/x/y"><span>Repository</span></a>'
               '<summary aria-label="Toggle hidden content">Show code cell source</summary>'
               '<input placeholder="Search this book..."/><img alt="Binder logo" src="b.svg"/>'
               '<p class="component-author">作者： The attnlib course team</p>'
               '<p class="copyright">© Copyright 2026.</p>'
               '<article><p>用 <code>reshape</code> 拆分，见 <a href="../appendix/bibliography.html#x" '
               'title="Ashish Vaswani. Attention is all you need.">Vaswani et al., 2017</a>。</p>'
               '<section id="module-attnlib.flash"><p>Returns the weights.</p></section>'
               '<div class="cell_output"><pre>tensor([1.])</pre></div></article></body></html>')
    chinese = ('<html lang="zh-CN"><head><title>3. 缩放 — 自注意力</title></head><body>'
               '<nav aria-label="主导航"><p class="caption">章节</p></nav>'
               '<button title="显示或隐藏左侧导航栏"></button>'
               '<a class="btn" href="https://github.com/x/y"><span>源码仓库</span></a>'
               '<summary aria-label="显示或隐藏内容">显示代码</summary>'
               '<input placeholder="搜索本书……"/><img alt="Binder 图标" src="b.svg"/>'
               '<p class="component-author">作者： attnlib 课程组</p>'
               '<p class="copyright">版权所有 © 2026。</p>'
               '<article><p>用 <code>reshape</code> 拆分，见 <a href="../appendix/bibliography.html#x" '
               'title="Ashish Vaswani. Attention is all you need.">Vaswani et al., 2017</a>。</p>'
               '<section id="module-attnlib.flash"><p>Returns the weights.</p></section>'
               '<div class="cell_output"><pre>tensor([1.])</pre></div></article></body></html>')
    monkeypatch.setattr(sys.modules[__name__], "SITE", tmp_path)
    (tmp_path / "en.html").write_text(english, encoding="utf-8")
    (tmp_path / "zh.html").write_text(chinese, encoding="utf-8")
    found = "\n".join(_chinese_page_english("en.html", chapter_identifiers))
    for phrase in ("Main", "Chapters", "Toggle primary sidebar", "Repository", "Toggle hidden content",
                   "Show code cell source", "Search this book", "Binder logo", "course team", "Copyright"):
        assert phrase in found, f"the detector missed {phrase!r}:\n{found}"
    assert _chinese_page_english("zh.html", chapter_identifiers) == []


_CLOSING_AFTER_MATH = re.compile(
    r'<span class="math notranslate nohighlight">[^<]*</span>([，。、；：！？）」』”’》…]+)(?![，。、；：！？）」』”’》…]|</span>)')


def test_chinese_formulas_keep_their_punctuation(pages):
    """Every inline formula of the Chinese edition that full-width punctuation follows is
    wrapped with it in <span class="attnlib-nobr"> (white-space: nowrap), so that "。" never
    starts a line; tests/browser/test_site.py checks the lines in a browser."""
    chinese = [n for n in pages if n.startswith(ZH)]
    if not chinese:
        pytest.fail("no Chinese page was built (`make book` builds both editions)")
    wrapped, loose = 0, []
    for name in chinese:
        text = (SITE / name).read_text(encoding="utf-8", errors="replace")
        wrapped += text.count('<span class="attnlib-nobr">')
        loose += [f"{name}: …{m.group(0)[-60:]}" for m in _CLOSING_AFTER_MATH.finditer(text)]
    assert wrapped > 300 and not loose, f"{wrapped} kept together; loose: {loose[:10]}"
    css = (ROOT / "site_assets" / "attnlib-edition.css").read_text(encoding="utf-8")
    assert re.search(r"\.attnlib-nobr\s*\{[^}]*white-space:\s*nowrap", css)
    english = (SITE / "chapters" / "03_scaling.html").read_text(encoding="utf-8")
    assert "attnlib-nobr" not in english, "the English edition keeps its own line breaking"


def test_evidence_blocks_are_collapsed_on_the_site(pages):
    """Each evidence cell of a chapter (``with al.evidence(...)``) is built, in both editions,
    as a cell whose code is behind the hide-input toggle and whose output is one closed
    <details class="attnlib-evidence"> (CONTRIBUTING.md, "Evidence blocks")."""
    checked, wrong = 0, []
    for nb_path in sorted((ROOT / "chapters").glob("*.ipynb")):
        cells = json.loads(nb_path.read_text(encoding="utf-8"))["cells"]
        wanted = sum("al.evidence(" in "".join(c["source"]) for c in cells if c["cell_type"] == "code")
        if not wanted:
            continue
        for prefix in ("", ZH):
            name = f"{prefix}chapters/{nb_path.stem}.html"
            if name not in pages:
                wrong.append(f"{name} was not built")
                continue
            text = (SITE / name).read_text(encoding="utf-8")
            cells_html = re.findall(r'<div class="cell [^"]*\btag_evidence\b[^"]*"', text)
            elements = re.findall(r'<details class="attnlib-evidence"[^>]*>', text)
            if len(cells_html) != wanted or not all("tag_hide-input" in c for c in cells_html):
                wrong.append(f"{name}: {len(cells_html)} evidence cells behind hide-input, the notebook has {wanted}")
            if len(elements) != wanted or any(" open" in e for e in elements):
                wrong.append(f"{name}: {len(elements)} closed evidence elements, the notebook has {wanted}")
            checked += 1
    assert checked, "no chapter has an evidence block (chapters/03_scaling.ipynb should)"
    assert not wrong, "\n".join(wrong)
